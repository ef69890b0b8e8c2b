"""The ingest stage end to end, on local folders and on S3 (moto's server, real boto3, real delta-rs):
idempotent re-runs, changed objects, and tables that read back with polars and DuckDB."""

import json
from datetime import date

import duckdb
import polars as pl
import pytest

from pipelines.demo import generate
from pipelines.record.schema import TABLES
from tests.environments import local_settings, run_stage, s3_settings

DAY = date(2026, 11, 29)
INGEST_TABLES = ("calls", "spans", "traces", "ingest_log")


def _state(warehouse):
    return {t: (warehouse.version(t), warehouse.read(t).height) for t in INGEST_TABLES}


def _settings(kind, tmp_path, request):
    if kind == "local":
        return local_settings(tmp_path)
    return s3_settings(request.getfixturevalue("s3"))


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_ingest_then_rerun_changes_nothing(kind, tmp_path, request, instance):
    settings = _settings(kind, tmp_path, request)
    summary = generate(settings.source_uri, calls=300, days=1, seed=5, end=DAY, endpoint_url=settings.endpoint_url)
    first = run_stage(settings, "ingest", DAY.isoformat(), instance)
    assert first.success
    warehouse = settings.warehouse()
    state = _state(warehouse)
    assert state["calls"][1] == summary.calls
    assert state["ingest_log"][1] == summary.objects
    assert warehouse.read("traces").height > 0

    second = run_stage(settings, "ingest", DAY.isoformat(), instance)
    assert second.success
    assert _state(warehouse) == state, "a re-run must leave row counts and table versions unchanged"
    calls_meta = second.asset_materializations_for_node("raw_traces")[0].metadata
    assert calls_meta["objects_skipped_unchanged"].value == summary.objects
    assert calls_meta["objects_ingested"].value == 0


def test_a_changed_object_is_reingested_and_replaces_its_rows(tmp_path, instance):
    settings = local_settings(tmp_path)
    folder = tmp_path / "source" / "2026" / "11" / "29"
    folder.mkdir(parents=True)
    doc = {
        "trace_id": "t",
        "occurred_at": "2026-11-29T10:00:00Z",
        "model": {"id": "m"},
        "span_id": "a",
        "request": {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
    }
    obj = folder / "calls.jsonl"
    obj.write_text("\n".join(json.dumps({**doc, "span_id": s}) for s in ("a", "b", "c")))
    assert run_stage(settings, "ingest", "2026-11-29", instance).success
    warehouse = settings.warehouse()
    assert sorted(warehouse.read("calls")["span_id"]) == ["a", "b", "c"]

    # the application rewrote the object: one call changed, one vanished
    changed = [{**doc, "span_id": "a", "latency_ms": 5.0}, {**doc, "span_id": "b"}]
    obj.write_text("\n".join(json.dumps(d) for d in changed))
    assert run_stage(settings, "ingest", "2026-11-29", instance).success
    calls = warehouse.read("calls").sort("span_id")
    assert calls["span_id"].to_list() == ["a", "b"]
    assert calls["latency_ms"].to_list()[0] == 5.0
    assert warehouse.read("spans").height == 2
    assert warehouse.read("ingest_log").height == 2  # one row per object version


def test_tables_read_back_with_polars_and_duckdb(tmp_path, instance):
    settings = local_settings(tmp_path)
    generate(settings.source_uri, calls=200, days=1, seed=9, end=DAY)
    assert run_stage(settings, "ingest", DAY.isoformat(), instance).success
    warehouse = settings.warehouse()

    calls = pl.read_delta(warehouse.table_uri("calls"))
    assert calls.schema["occurred_at"] == pl.Datetime("us", "UTC")
    assert set(TABLES["calls"].names) == set(calls.columns)
    assert calls["occurred_hour"].to_list() == calls["occurred_at"].dt.hour().cast(pl.Int32).to_list()
    by_service = pl.SQLContext(calls=calls).execute(
        "SELECT service, count(*) AS n FROM calls GROUP BY service ORDER BY service", eager=True
    )
    assert by_service["service"].to_list() == ["agent.orders", "support.answer", "support.triage"]

    spans = warehouse.table("spans").to_pyarrow_dataset()
    kinds = duckdb.sql("SELECT kind, count(*) AS n FROM spans GROUP BY kind ORDER BY kind").pl()
    assert "llm_call" in kinds["kind"].to_list() and kinds["n"].sum() == spans.count_rows()
    traces = warehouse.read("traces")  # a polars frame DuckDB can join with the one above
    both = duckdb.sql("SELECT t.outcome, count(*) AS n FROM calls c JOIN traces t USING (trace_id) GROUP BY 1").pl()
    assert both["n"].sum() == calls.height and set(both["outcome"]) <= set(traces["outcome"])
