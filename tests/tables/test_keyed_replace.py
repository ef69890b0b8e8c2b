"""A write replaces the rows it changes and nothing else (pipelines/delta.py, "keyed
replace"): new rows go in beside the stored files, a changed row rewrites only the file
that held it, a key of several columns keeps its other rows, a delete by predicate takes
out exactly what it names, and a write that changes nothing commits nothing. This is
what keeps a shard's write the size of the shard, whatever the day already holds
(``python bench/shards.py``)."""

from __future__ import annotations

from datetime import date

import polars as pl

from pipelines.warehouse import DeltaWarehouse

DAY = date(2026, 11, 29)


def log_row(key: str, etag: str = "e1", digest: str = "d1", day: date = DAY) -> dict:
    return {"source_key": key, "etag": etag, "partition_date": day, "record_sha256": digest, "status": "ok"}


def files(warehouse: DeltaWarehouse, name: str) -> set[str]:
    return set(warehouse.table(name).file_uris())


def stored(warehouse: DeltaWarehouse) -> dict[tuple[str, str], str]:
    rows = warehouse.read("ingest_log", columns=["source_key", "etag", "record_sha256"]).iter_rows()
    return {(key, etag): digest for key, etag, digest in rows}


def test_new_rows_go_in_beside_the_stored_files(tmp_path):
    warehouse = DeltaWarehouse(uri=str(tmp_path))
    warehouse.merge("ingest_log", [log_row(f"a{i}") for i in range(50)])
    before = files(warehouse, "ingest_log")
    result = warehouse.merge("ingest_log", [log_row(f"b{i}") for i in range(5)])
    assert (result.inserted, result.updated, result.committed) == (5, 0, True)
    after = files(warehouse, "ingest_log")
    assert before < after, "no stored file was removed or rewritten to add rows"
    assert len(stored(warehouse)) == 55


def test_a_changed_row_rewrites_only_the_file_that_held_it_and_keeps_its_other_rows(tmp_path):
    warehouse = DeltaWarehouse(uri=str(tmp_path))
    # two files of one partition; the first holds two versions of object "k" (a key of two columns)
    warehouse.merge("ingest_log", [log_row("k", "e1"), log_row("k", "e2"), *[log_row(f"a{i}") for i in range(20)]])
    first = files(warehouse, "ingest_log")
    warehouse.merge("ingest_log", [log_row(f"b{i}") for i in range(20)])
    second = files(warehouse, "ingest_log") - first

    result = warehouse.merge("ingest_log", [log_row("k", "e1", digest="d2")])
    assert (result.inserted, result.updated) == (0, 1)
    now = files(warehouse, "ingest_log")
    assert second <= now, "the file without the changed key is untouched"
    assert not first & now, "the file that held it was rewritten"
    rows = stored(warehouse)
    assert rows[("k", "e1")] == "d2" and rows[("k", "e2")] == "d1", "the other version of k is kept as it was"
    assert len(rows) == 42


def test_a_delete_by_predicate_takes_out_exactly_what_it_names(tmp_path):
    warehouse = DeltaWarehouse(uri=str(tmp_path))
    other_day = date(2026, 11, 28)
    warehouse.merge(
        "ingest_log", [log_row("k", "e1"), log_row("k", "e2"), log_row("j"), log_row("k", "e0", day=other_day)]
    )
    # object k changed: its new version replaces what the old ones wrote on DAY
    result = warehouse.merge("ingest_log", [log_row("k", "e3")], partitions=[DAY], replace=pl.col("source_key") == "k")
    assert (result.inserted, result.deleted) == (1, 2)
    assert set(stored(warehouse)) == {("k", "e3"), ("j", "e1"), ("k", "e0")}
    assert warehouse.read("ingest_log", pl.col("partition_date") == other_day).height == 1


def test_a_table_without_record_digest_is_matched_on_the_whole_row(tmp_path):
    warehouse = DeltaWarehouse(uri=str(tmp_path))
    row = {"quarantine_id": "q1", "source_key": "k", "line": 1, "message": "m"}
    warehouse.merge("quarantine", [row, {**row, "quarantine_id": "q2"}])
    version = warehouse.version("quarantine")
    assert not warehouse.merge("quarantine", [row]).committed, "the same row again changes nothing"
    assert warehouse.version("quarantine") == version
    result = warehouse.merge("quarantine", [{**row, "message": "n"}])
    assert (result.updated, result.committed) == (1, True)
    assert sorted(warehouse.read("quarantine")["message"].to_list()) == ["m", "n"]
