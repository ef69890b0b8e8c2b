# ruff: noqa: E501  (fixture data is kept one record per line, as sources write it)
"""Langfuse blob export (manifest-gated, JSONL and Parquet, overlapping windows,
late scores) through the real ingest job, and the public API's trace JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.ingest.objects import SourceObject, ingest_objects
from tests.environments import local_settings, run_stage

DAY = "2026-11-30"
PROJECT = "langfuse/7a88fb47-b4e2-43b8-a06c-a5ce950dc53a"
GEN1 = {
    "id": "obs-gen-1", "trace_id": "tr-7f3a", "project_id": "7a88", "environment": "production", "type": "GENERATION",
    "parent_observation_id": "obs-root", "start_time": "2026-11-30 09:16:43.912000", "end_time": "2026-11-30 09:16:43.947000",
    "name": "anthropic.messages.create", "metadata": {"stop_reason": "tool_use"}, "level": "DEFAULT", "status_message": "",
    "version": "", "input": json.dumps({"system": "You are a weather bot.", "messages": [{"role": "user", "content": "Weather in Paris?"}]}),
    "output": json.dumps({"role": "assistant", "content": [{"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}}]}),
    "provided_model_name": "claude-sonnet-4-5-20250929", "model_parameters": '{"max_tokens":256,"temperature":"0.2"}',
    "usage_details": {"input": 455, "output": 52, "cache_creation_input_tokens": 1024, "total": 1531},
    "cost_details": {"total": 0.005985}, "completion_start_time": None, "prompt_id": "pr-9", "prompt_name": "weather-system",
    "prompt_version": 3, "total_cost": 0.005985, "latency": 0.035, "time_to_first_token": None, "model_id": "cm-1",
    "created_at": "2026-11-30 09:16:44.010000", "updated_at": "2026-11-30 09:16:44.010000",
    "tool_calls": ['{"id":"toolu_01A","name":"get_weather","arguments":"{\\"city\\":\\"Paris\\"}"}'], "tool_call_names": ["get_weather"],
    "tool_definitions": {"get_weather": '{"description":"Current weather for a city","parameters":{"type":"object"}}'},
    "user_id": "u_123", "session_id": "sess-42", "trace_name": "weather-agent", "tags": ["prod"], "release": "v1.4.2",
    "bookmarked": False, "public": False,
}  # fmt: skip
TOOL = {**GEN1, "id": "obs-tool-1", "type": "TOOL", "name": "get_weather", "start_time": "2026-11-30 09:16:43.950000",
        "end_time": "2026-11-30 09:16:43.960000", "input": '{"city": "Paris"}', "output": '"15 C, sunny"',
        "metadata": {"tool_call_id": "toolu_01A"}}  # fmt: skip
GEN2 = {**GEN1, "id": "obs-gen-2", "start_time": "2026-11-30 09:16:44.000000", "end_time": None, "latency": 0.5,
        "input": json.dumps({"system": "You are a weather bot.", "messages": [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": "15 C, sunny"}]}]}),
        "output": json.dumps({"role": "assistant", "content": [{"type": "text", "text": "It is 15 C."}]}),
        "metadata": {"stop_reason": "end_turn"}}  # fmt: skip
SCORE_CALL = {"id": "sc-2", "timestamp": "2026-11-30 09:25:00.000000", "project_id": "7a88", "environment": "production",
              "trace_id": "tr-7f3a", "observation_id": "obs-gen-1", "session_id": None, "dataset_run_id": None,
              "name": "faithfulness", "value": 0.92, "source": "EVAL", "comment": "Grounded in tool result.",
              "data_type": "NUMERIC", "string_value": None, "created_at": "2026-11-30 09:25:01.000000",
              "updated_at": "2026-11-30 09:25:01.000000"}  # fmt: skip
SCORE_TRACE = {**SCORE_CALL, "id": "sc-1", "observation_id": None, "name": "user_thumbs", "value": 1, "source": "API",
               "data_type": "BOOLEAN", "string_value": "True", "comment": "spot on"}  # fmt: skip
SCORE_LATE = {**SCORE_CALL, "id": "sc-3", "observation_id": "obs-gen-2", "name": "correctness", "value": 0.0,
              "timestamp": "2026-11-30 11:00:00.000000"}  # fmt: skip


def _write(root, table: str, ts: str, rows: list[dict], parquet: bool = False) -> None:
    folder = root / PROJECT / table
    folder.mkdir(parents=True, exist_ok=True)
    if parquet:
        pq.write_table(
            pa.Table.from_pylist([{**r, "metadata": json.dumps(r["metadata"])} for r in rows]), folder / f"{ts}.parquet"
        )
    else:
        (folder / f"{ts}.jsonl").write_text("\n".join(json.dumps(r) for r in rows))


def _manifest(root, ts: str) -> None:
    folder = root / PROJECT / "manifests"
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"window": {"minTimestamp": ts, "maxTimestamp": ts}, "exportSource": "ENRICHED_OBSERVATIONS",
           "tables": ["observations_v2", "scores"], "files": []}  # fmt: skip
    (folder / f"{ts}.json").write_text(json.dumps(doc))


def _calls(warehouse) -> dict[str, dict]:
    return {r["span_id"]: r for r in warehouse.read("calls").to_dicts()}


def test_blob_export_through_the_ingest_job(tmp_path, instance):
    settings = local_settings(tmp_path, layouts=("langfuse/*/*/{yyyy}-{mm}-{dd}T*",))
    source = tmp_path / "source"
    w1, w2, w3 = "2026-11-30T09:00:00.000Z", "2026-11-30T09:20:00.000Z", "2026-11-30T11:00:00.000Z"
    _write(source, "observations_v2", w1, [GEN1, TOOL])
    _write(source, "scores", w1, [SCORE_CALL, SCORE_TRACE])
    _manifest(source, w1)
    # window 2 overlaps window 1 (GEN1 again) and is Parquet; its manifest is not written yet
    _write(source, "observations_v2", w2, [GEN1, TOOL, GEN2], parquet=True)

    assert run_stage(settings, "ingest", DAY, instance).success
    warehouse = settings.warehouse()
    calls = _calls(warehouse)
    assert set(calls) == {"obs-gen-1"}, "a run without its manifest waits"
    gen1 = calls["obs-gen-1"]
    assert gen1["source_format"] == "langfuse_export" and gen1["trace_id"] == "tr-7f3a"
    assert (
        gen1["system_text"] == "You are a weather bot."
        and gen1["messages"][0]["parts"][0]["text"] == "Weather in Paris?"
    )
    assert gen1["output_messages"][0]["parts"][1]["tool_call_id"] == "toolu_01A"
    assert gen1["tool_definitions"][0]["name"] == "get_weather"
    assert gen1["params"]["temperature"] == 0.2 and gen1["params"]["max_tokens"] == 256
    assert (gen1["request_model"], gen1["finish_reason"], gen1["stop_reason_native"]) == (
        "claude-sonnet-4-5-20250929",
        "tool_call",
        "tool_use",
    )
    assert gen1["usage"]["input_tokens"] == 455 and gen1["usage"]["cache_write_input_tokens"] == 1024
    assert gen1["usage"]["cost_usd"] == 0.005985
    assert (gen1["user_id"], gen1["session_id"], gen1["template_id"], gen1["template_version"]) == (
        "u_123",
        "sess-42",
        "weather-system",
        "3",
    )
    assert gen1["occurred_at"] == datetime(2026, 11, 30, 9, 16, 43, 912000, tzinfo=UTC), "zone-less times are UTC"
    assert gen1["latency_ms"] == 35.0
    assert {f["id"] for f in gen1["feedback"]} == {"sc-1", "sc-2"}
    faithfulness = next(f for f in gen1["feedback"] if f["id"] == "sc-2")
    assert (faithfulness["value_number"], faithfulness["comment"], faithfulness["source"]) == (
        0.92,
        "Grounded in tool result.",
        "langfuse:eval",
    )
    assert warehouse.read("traces").filter(trace_id="tr-7f3a").height == 1

    _manifest(source, w2)
    _write(source, "scores", w3, [SCORE_LATE])
    _manifest(source, w3)
    assert run_stage(settings, "ingest", DAY, instance).success
    calls = _calls(warehouse)
    assert warehouse.read("calls").height == 2, "overlapping windows: each call once"
    assert {f["id"] for f in calls["obs-gen-1"]["feedback"]} == {"sc-1", "sc-2"}, "feedback survives re-ingestion"
    gen2 = calls["obs-gen-2"]
    assert [f["id"] for f in gen2["feedback"]] == ["sc-3"], "a later score merges onto the stored call"
    assert gen2["latency_ms"] == 500.0 and "latency_unit_assumed" in gen2["flags"]
    assert gen2["messages"][2]["parts"][0]["type"] == "tool_result"
    assert [t["tool_call_id"] for t in gen2["tool_executions"]] == ["toolu_01A"]

    versions = {t: warehouse.version(t) for t in ("calls", "spans", "ingest_log")}
    assert run_stage(settings, "ingest", DAY, instance).success
    assert {t: warehouse.version(t) for t in versions} == versions, "a re-run changes nothing"


def test_public_api_trace_json():
    trace = {
        "id": "tr-7f3a", "timestamp": "2026-11-30T09:16:43.884Z", "name": "weather-agent", "sessionId": "sess-42",
        "userId": "u_123", "release": "v1.4.2", "tags": ["prod"], "environment": "production",
        "observations": [{
            "id": "obs-gen-1", "traceId": "tr-7f3a", "type": "GENERATION", "name": "anthropic.messages.create",
            "startTime": "2026-11-30T09:16:43.912Z", "endTime": "2026-11-30T09:16:43.947Z", "model": "claude-sonnet-4-5-20250929",
            "modelParameters": {"max_tokens": 256, "temperature": "0.2"},
            "input": {"system": "You are a weather bot.", "messages": [{"role": "user", "content": "Weather in Paris?"}],
                      "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]},
            "output": {"role": "assistant", "content": [{"type": "text", "text": "Let me check."}]},
            "metadata": {"stop_reason": "end_turn"}, "level": "DEFAULT", "parentObservationId": "obs-root",
            "promptName": "weather-system", "promptVersion": 3,
            "usageDetails": {"input": 455, "output": 52, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 1024, "total": 1531},
        }],
        "scores": [{"id": "sc-1", "traceId": "tr-7f3a", "observationId": "obs-gen-1", "name": "user_thumbs", "source": "API",
                    "dataType": "BOOLEAN", "value": 1, "stringValue": "True", "comment": "spot on", "timestamp": "2026-11-30T09:20:00Z"}],
    }  # fmt: skip
    data = json.dumps(trace).encode()
    now = datetime.now(UTC)
    batch = ingest_objects(
        [SourceObject("lf/trace.json", "lf/trace.json", "e", len(data), now, data)], now.date(), "r", now
    )
    (call,) = batch.calls
    assert call["source_format"] == "langfuse_api" and (call["user_id"], call["session_id"]) == ("u_123", "sess-42")
    assert (
        call["release"] == "v1.4.2"
        and call["tags"] == ["prod"]
        and call["tool_definitions"][0]["name"] == "get_weather"
    )
    assert call["params"]["temperature"] == 0.2 and call["usage"]["cache_write_input_tokens"] == 1024
    assert (call["finish_reason"], call["output_text"]) == ("stop", "Let me check.")
    assert [(f["name"], f["value_number"], f["value_string"]) for f in call["feedback"]] == [
        ("user_thumbs", 1.0, "True")
    ]
