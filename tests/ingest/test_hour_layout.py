"""`calls` and `spans` are laid out by day and hour (schema.PARTITIONS): a shard's merge reads
only the files of the hours its rows fall in, never the rest of the day; a write reaching
into many stored hours is merged hour by hour; a table written before the hour layout keeps
working and ``Warehouse.relayout`` rewrites it into the new one."""

from __future__ import annotations

import json
import logging
from datetime import date
from pathlib import Path

import polars as pl
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from pipelines.demo import generate
from pipelines.record.schema import KEYS
from pipelines.record.stored import HOUR, to_stored
from pipelines.resources import warehouse as warehouse_module
from pipelines.resources.object_store import ObjectStore
from pipelines.resources.warehouse import Warehouse, to_arrow
from pipelines.shards import ShardSpec
from tests.production.shard_writer import write_shard

DAY = date(2026, 11, 29)
SPEC = "hour:4"


def _files_by_hour(uri: str, version: int) -> dict[tuple[str, int], int]:
    actions = pa.table(DeltaTable(uri, version=version).get_add_actions(flatten=True)).to_pylist()
    counts: dict[tuple[str, int], int] = {}
    for a in actions:
        at = (str(a["partition.occurred_date"]), a[f"partition.{HOUR}"])
        counts[at] = counts.get(at, 0) + 1
    return counts


def _commit(uri: str, version: int) -> tuple[dict, list[tuple[str, int]], int]:
    """A commit's merge metrics, the (day, hour) of each file it added, and how many it removed."""
    lines = [json.loads(line) for line in (Path(uri) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]
    info = next(line["commitInfo"] for line in lines if "commitInfo" in line)
    added = [
        (a["add"]["partitionValues"]["occurred_date"], int(a["add"]["partitionValues"][HOUR]))
        for a in lines
        if "add" in a
    ]
    return info.get("operationMetrics") or {}, added, sum("remove" in line for line in lines)


def _keys(warehouse: Warehouse, table: str) -> pl.DataFrame:
    return warehouse.read(table, columns=list(KEYS[table])).sort(list(KEYS[table]))


def test_a_shards_merge_reads_only_the_files_of_its_own_hours(tmp_path):
    generate(str(tmp_path / "source"), calls=300, days=1, seed=5, end=DAY)
    source = ObjectStore(uri=str(tmp_path / "source"), shards=SPEC)
    warehouse = Warehouse(uri=str(tmp_path / "wh"))
    for shard in (0, 1, 3):
        write_shard(source, warehouse, DAY, shard, 4)
    uri = warehouse.table_uri("calls")
    assert DeltaTable(uri).metadata().partition_columns == ["occurred_date", HOUR]
    before = warehouse.version("calls")

    write_shard(source, warehouse, DAY, 2, 4)  # hours 12-17, into a day whose other hours hold files
    after = warehouse.version("calls")
    assert after > before
    for version in range(before + 1, after + 1):
        metrics, added, removed = _commit(uri, version)
        stored = _files_by_hour(uri, version - 1)
        touched = set(added)
        # it read exactly the files already in the hours it writes into, and none of the others
        assert metrics["num_target_files_scanned"] == sum(stored.get(at, 0) for at in touched)
        assert metrics["num_target_files_skipped_during_scan"] == sum(stored.values()) - sum(
            stored.get(at, 0) for at in touched
        )
        assert removed == 0
    own = ShardSpec.parse(SPEC).hours_of(2)
    _, added, _ = _commit(uri, before + 1)
    assert {hour for _, hour in added} & set(own), "the shard's own hours are in its first merge"
    assert sum(_files_by_hour(uri, before).values()) > 0

    # the rows of a whole-day run, each once, and a re-run commits nothing
    whole = Warehouse(uri=str(tmp_path / "whole"))
    write_shard(ObjectStore(uri=str(tmp_path / "source")), whole, DAY, 0, 1)
    for table in ("calls", "spans"):
        assert _keys(warehouse, table).equals(_keys(whole, table)), table
    assert HOUR not in warehouse.read("calls").columns and HOUR not in warehouse.read("spans").columns
    write_shard(source, warehouse, DAY, 2, 4)
    assert warehouse.version("calls") == after


def test_a_write_into_many_stored_hours_is_merged_hour_by_hour(tmp_path, monkeypatch):
    generate(str(tmp_path / "source"), calls=200, days=1, seed=3, end=DAY)
    warehouse = Warehouse(uri=str(tmp_path / "wh"))
    write_shard(ObjectStore(uri=str(tmp_path / "source")), warehouse, DAY, 0, 1)
    calls = warehouse.read("calls")
    hours = sorted(set(calls["occurred_at"].dt.hour().to_list()))
    # one changed call in each of three stored hours: three merges of one hour each
    picked = (
        calls.with_columns(h=pl.col("occurred_at").dt.hour()).filter(pl.col("h").is_in(hours[:3])).group_by("h").first()
    )
    changed = picked.with_columns(record_sha256=pl.lit("f" * 64), service=pl.lit("changed"))
    rows = to_arrow("calls", changed.select(calls.columns))
    uri, before = warehouse.table_uri("calls"), warehouse.version("calls")
    monkeypatch.setattr(warehouse_module, "MERGE_READ_ROWS", 1)
    result = warehouse.merge("calls", rows, partitions={DAY})
    assert result.updated == 3 and result.inserted == 0 and result.committed
    assert warehouse.version("calls") == before + 3
    for version in range(before + 1, before + 4):
        metrics, added, _ = _commit(uri, version)
        stored = _files_by_hour(uri, version - 1)
        assert len(set(added)) == 1 and metrics["num_target_files_scanned"] == stored[added[0]]
    assert warehouse.read("calls").filter(pl.col("service") == "changed").height == 3
    assert warehouse.read("calls").height == calls.height


def test_a_table_of_the_old_layout_keeps_working_until_relayout_rewrites_it(tmp_path, caplog):
    generate(str(tmp_path / "source"), calls=120, days=1, seed=7, end=DAY)
    fresh = Warehouse(uri=str(tmp_path / "fresh"))
    write_shard(ObjectStore(uri=str(tmp_path / "source")), fresh, DAY, 0, 1)
    rows = to_arrow("calls", fresh.read("calls"))

    # a warehouse written before the hour layout: calls partitioned by day only
    old = Warehouse(uri=str(tmp_path / "old"))
    stored = to_stored("calls", rows.slice(0, 60)).drop_columns([HOUR])
    write_deltalake(old.table_uri("calls"), stored, partition_by=["occurred_date"])
    with caplog.at_level(logging.WARNING):
        result = old.merge("calls", rows, partitions={DAY})
    assert result.inserted == rows.num_rows - 60
    assert "tracelake relayout calls" in caplog.text
    table = old.table("calls")
    assert table.metadata().partition_columns == ["occurred_date"] and HOUR not in table.schema().to_arrow().names
    version = old.version("calls")
    assert not old.merge("calls", rows, partitions={DAY}).committed and old.version("calls") == version

    assert old.relayout("calls")
    assert old.table("calls").metadata().partition_columns == ["occurred_date", HOUR]
    assert _keys(old, "calls").equals(_keys(fresh, "calls"))
    assert old.read("calls").sort("call_id").equals(fresh.read("calls").sort("call_id"))
    assert not old.merge("calls", rows, partitions={DAY}).committed
    assert not old.relayout("calls"), "already in the current layout"
