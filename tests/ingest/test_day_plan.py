"""The day's write plan (``plan_day``) and the append into an empty partition.

The plan is everything the `raw_traces` asset writes: rows per table with
their partitions and replacement predicates, and the record accounting. Its
writes land as appends where a day holds nothing yet, as merges otherwise,
and a re-run of the same plan makes no new table version.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

import polars as pl

from pipelines.demo import generate
from pipelines.ingest.objects import SourceObject
from pipelines.ingest.plan import plan_day
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
    replaced = pl.DataFrame({"source_uri": [store.uri_for(listed[0].key), store.uri_for(listed[1].key)]})
    assert replaced.filter(again.write("calls").replace)["source_uri"].to_list() == [store.uri_for(listed[0].key)]


def test_writes_into_an_empty_day_then_a_rerun_makes_no_version(tmp_path):
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
            w.merge_into(warehouse)

    write_day(day_before)  # creates the tables
    write_day(DAY)  # the table exists, the day's partitions are empty
    stored = warehouse.read("calls")
    assert stored.filter(stored["occurred_date"] == DAY).height > 0
    assert stored["call_id"].n_unique() == stored.height

    versions = {t: warehouse.version(t) for t in ("calls", "spans")}
    write_day(DAY)  # the day is not empty now: a write that finds nothing new commits nothing
    assert {t: warehouse.version(t) for t in ("calls", "spans")} == versions
    assert warehouse.read("calls").height == stored.height


def _planting(monkeypatch, plants: dict[str, dict[str, object]], every: int) -> None:
    """Every ``every``-th row of each object gets ``plants[table]``, as a source would send it
    (before the schema check converts the day)."""
    from pipelines.ingest import objects as ingest

    normalized = ingest._normalized

    def planted(*args):
        fmt, result = normalized(*args)
        for table in ("calls", "spans"):
            for row in getattr(result, table)[::every]:
                row.update(plants.get(table, {}))
        return fmt, result

    monkeypatch.setattr(ingest, "_normalized", planted)


def test_the_plan_holds_back_every_row_the_screen_finds_and_writes_the_rest(tmp_path, monkeypatch):
    """Personal data a source sent in columns redaction keeps (a service, a release, a
    span's name) is found by the screen of the tables about to be written: exactly those
    rows (and the spans of a held call) are held back, by pointer, and the counts add up."""
    from pipelines.redact.policy import load_policy
    from pipelines.redact.redactor import Redactor
    from pipelines.redact.residual import PATTERNS
    from tests.redact.conftest import KEYS

    plants = {
        "calls": {"release": "v 529.982.247-25", "service": "ana@gmail.com"},
        "spans": {"name": 'a "b@gmail.com"'},
    }
    _planting(monkeypatch, plants, 4)
    generate(str(tmp_path / "source"), calls=80, days=1, seed=5, end=DAY)
    store = ObjectStore(uri=str(tmp_path / "source"))

    def read_objects(todo):
        for i in todo:
            yield SourceObject(i.key, store.uri_for(i.key), i.etag, i.size, i.last_modified, store.read(i.key))

    with Redactor(mode="placeholder", keys=KEYS, ner=False) as redactor:
        plan = plan_day(
            store.list_day(DAY), {}, read_objects, lambda ids, days: [], day=DAY, run_id="r", now=NOW,
            redactor=redactor, policy=load_policy(), patterns=PATTERNS,
        )  # fmt: skip
    calls, spans, audit = (plan.write(t).rows for t in ("calls", "spans", "redaction_audit"))
    held = [q for q in plan.batch.quarantine if q["error_class"] == "residual_pii"]
    assert len(held) == plan.counts["records_quarantined_residual_pii"] > 10
    assert not {"ana@gmail.com"} & set(calls["service"].to_pylist())
    assert not [n for n in spans["name"].to_pylist() if "gmail" in (n or "")]
    written = {"calls": set(calls["call_id"].to_pylist()), "spans": set(spans["span_key"].to_pylist())}
    audited = zip(audit["source_table"].to_pylist(), audit["span_key"].to_pylist(), strict=True)
    assert all(key in written[source] for source, key in audited)  # no audit row of a held row
    assert set(spans["call_id"].drop_null().to_pylist()) <= written["calls"]  # no span of a held call
    assert (calls.num_rows, spans.num_rows) == (len(plan.batch.calls), len(plan.batch.spans)) and calls.num_rows
    messages = [q["message"] for q in held]
    assert any("email, cpf" in m for m in messages) and not any("ana@" in m or "529.982" in m for m in messages)
    for row in plan.write("ingest_log").rows:
        assert row["records_read"] == row["records_ingested"] + row["records_quarantined"]
