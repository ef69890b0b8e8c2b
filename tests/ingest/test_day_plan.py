"""The day's write plan (``plan_day``) and the append into an empty partition.

The plan is everything the `raw_traces` asset writes: rows per table with
their partitions and replacement predicates, and the record accounting. Its
writes land as appends where a day holds nothing yet, as merges otherwise,
and a re-run of the same plan makes no new table version.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from pipelines.demo import generate
from pipelines.ingest import SourceObject
from pipelines.ingest_plan import plan_day
from pipelines.resources.object_store import ObjectStore
from pipelines.resources.warehouse import Warehouse

DAY = date(2026, 11, 20)
NOW = datetime(2026, 11, 21, 3, tzinfo=UTC)


def _plan(store: ObjectStore, seen: dict[str, str]):
    def read_objects(todo):
        for i in todo:
            yield SourceObject(i.key, store.uri_for(i.key), i.etag, i.size, i.last_modified, store.read(i.key))

    return plan_day(store.list_day(DAY), seen, read_objects, lambda ids, days: [], day=DAY, run_id="r", now=NOW)


def test_plan_accounts_for_every_record_and_writes_ingest_log_last(tmp_path):
    generate(str(tmp_path / "source"), calls=150, days=1, seed=3, end=DAY)
    store = ObjectStore(uri=str(tmp_path / "source"))
    plan = _plan(store, {})
    assert [w.table for w in plan.writes] == ["calls", "spans", "quarantine", "ingest_log"]
    calls = plan.write("calls")
    assert calls.rows.num_rows == len(plan.batch.calls) > 0
    assert calls.partitions == {DAY} and calls.replace is None
    log = plan.write("ingest_log").rows
    assert plan.counts["objects_ingested"] == len(log) == plan.counts["objects_listed"]
    assert sum(r["records_read"] for r in log) == plan.counts["records_read"]
    for row in log:
        assert row["records_read"] == row["records_ingested"] + row["records_quarantined"]

    # a changed object (new etag) replaces what its previous version wrote; the rest are skipped
    listed = store.list_day(DAY)
    seen = {o.key: o.etag for o in listed[1:]} | {listed[0].key: "an-older-etag"}
    again = _plan(store, seen)
    assert again.counts["objects_ingested"] == 1 and again.counts["objects_skipped_unchanged"] == len(listed) - 1
    assert again.write("calls").replace == f"t.source_uri IN ('{store.uri_for(listed[0].key)}')"


def test_writes_append_into_an_empty_day_and_a_rerun_makes_no_version(tmp_path):
    generate(str(tmp_path / "source"), calls=120, days=2, seed=4, end=DAY)
    store = ObjectStore(uri=str(tmp_path / "source"))
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    day_before = date(2026, 11, 19)

    def write_day(day: date) -> None:
        def read_objects(todo):
            for i in todo:
                yield SourceObject(i.key, store.uri_for(i.key), i.etag, i.size, i.last_modified, store.read(i.key))

        plan = plan_day(store.list_day(day), {}, read_objects, lambda ids, days: [], day=day, run_id="r", now=NOW)
        for w in plan.writes:
            warehouse.merge(
                w.table, w.rows, partitions=w.partitions, replace=w.replace, append_when_empty=w.append_when_empty
            )

    write_day(day_before)  # creates the tables
    write_day(DAY)  # the table exists, the day's partition is empty: an append
    operations = [c["operation"] for c in warehouse.table("calls").history()]
    assert operations[0] == "WRITE", operations  # newest first: the append
    stored = warehouse.read("calls")
    assert stored.filter(stored["occurred_date"] == DAY).height > 0
    assert stored["call_id"].n_unique() == stored.height

    versions = {t: warehouse.version(t) for t in ("calls", "spans")}
    write_day(DAY)  # the day is not empty now: a merge that finds nothing new
    assert {t: warehouse.version(t) for t in ("calls", "spans")} == versions
    assert warehouse.read("calls").height == stored.height
