"""Re-ingesting an object never duplicates what was joined onto its calls:
after a crash between table commits (calls written, ingest_log not) and after
a re-delivery of the same content, feedback, scores, tool executions and
retrievals are there once, and a crash re-run writes no new table version."""

import json
from datetime import UTC, date, datetime

import polars as pl

from pipelines.formats.assembly import carry_over
from pipelines.ingest.objects import SourceObject, ingest_object
from pipelines.resources.warehouse import to_arrow
from tests.environments import local_settings, run_stage

DAY = date(2026, 11, 29)
NOW = datetime(2026, 11, 30, tzinfo=UTC)


def _frozen(span_id: str) -> dict:
    return {
        "format": "tracelake.frozen_call",
        "trace_id": "t-1",
        "span_id": span_id,
        "occurred_at": "2026-11-29T10:00:00Z",
        "model": {"id": "claude-haiku-4-5"},
        "request": {
            "model": "claude-haiku-4-5",
            "max_tokens": 50,
            "messages": [
                {"role": "user", "content": "status of my order?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "tu-1", "name": "lookup", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu-1", "content": "shipped"}]},
            ],
        },
        "retrieval": {"doc_ids": ["kb-1", "kb-2"], "texts": ["shipping policy", "returns policy"]},
        "tool_executions": [{"tool_call_id": "tu-1", "name": "lookup", "result": "shipped"}],
        "feedback": [{"value": 1, "name": "thumbs", "at": "2026-11-29T10:05:00Z"}, {"value": "down", "name": "csat"}],
    }


def _agent_session() -> list[dict]:
    base = {"session_id": "s", "trace_id": "t-2", "parent_event_id": None}
    prompt = [{"role": "user", "content": "refund"}]
    return [
        {**base, "event_id": "e1", "step_index": 0, "timestamp": "2026-11-29T11:00:00Z", "event_type": "llm.call",
         "payload": {"model": "gpt-4o", "prompt": prompt, "response": "checking", "prompt_tokens": 5}},
        {**base, "event_id": "e2", "step_index": 1, "timestamp": "2026-11-29T11:00:01Z", "event_type": "tool.invoke",
         "payload": {"tool_name": "refund", "arguments": {}, "result": "ok"}, "parent_event_id": "e1"},
        {**base, "event_id": "e3", "step_index": 2, "timestamp": "2026-11-29T11:00:02Z", "event_type": "llm.call",
         "payload": {"model": "gpt-4o", "prompt": prompt, "response": "done", "prompt_tokens": 9}},
    ]  # fmt: skip


def _counts(warehouse) -> dict[str, tuple]:
    calls = warehouse.read("calls").sort("span_id")
    return {
        row["span_id"]: (
            len(row["feedback"] or []),
            len(row["tool_executions"] or []),
            len((row["retrieval"] or {}).get("documents") or []),
        )
        for row in calls.iter_rows(named=True)
    }


def _write(tmp_path):
    folder = tmp_path / "source" / "2026" / "11" / "29"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "calls.jsonl").write_text(json.dumps(_frozen("c-1")))
    (folder / "agent.jsonl").write_text("\n".join(json.dumps(e) for e in _agent_session()))
    return folder


def test_a_crash_between_table_commits_then_a_rerun_duplicates_nothing(tmp_path, instance):
    settings = local_settings(tmp_path)
    _write(tmp_path)
    assert run_stage(settings, "ingest", DAY.isoformat(), instance).success
    warehouse = settings.warehouse()
    first = _counts(warehouse)
    assert first == {"c-1": (2, 1, 2), "e1": (0, 0, 0), "e3": (0, 1, 0)}
    versions = {t: warehouse.version(t) for t in ("calls", "spans")}

    # the run died after writing calls and spans, before ingest_log: the objects look new again
    warehouse.delete("ingest_log", pl.lit(True))
    assert run_stage(settings, "ingest", DAY.isoformat(), instance).success
    assert _counts(warehouse) == first
    assert {t: warehouse.version(t) for t in ("calls", "spans")} == versions, "nothing new: no new version"

    # the core rule underneath: a call merged with its stored self gains nothing
    stored = {r["call_id"]: r for r in to_arrow("calls", warehouse.read("calls")).to_pylist()}
    for path in sorted((tmp_path / "source").rglob("*.jsonl")):
        obj = SourceObject(
            key=path.name, uri=str(path), etag="again", size=0, last_modified=NOW, data=path.read_bytes()
        )
        for call in ingest_object(obj, DAY, "r", NOW).calls:
            assert carry_over(call, stored[call["call_id"]]) is False, call["span_id"]


def test_a_redelivered_object_duplicates_nothing(tmp_path, instance):
    settings = local_settings(tmp_path)
    folder = _write(tmp_path)
    assert run_stage(settings, "ingest", DAY.isoformat(), instance).success
    warehouse = settings.warehouse()
    first = _counts(warehouse)
    # the same content delivered again (a new etag): the object is read again
    for path in folder.iterdir():
        path.write_text(path.read_text() + "\n")
    assert run_stage(settings, "ingest", DAY.isoformat(), instance).success
    assert _counts(warehouse) == first
    assert warehouse.read("ingest_log").height == 4  # both versions of both objects are logged
    assert warehouse.read("calls").height == 3 and warehouse.read("spans").filter(pl.col("kind") == "tool").height == 1
