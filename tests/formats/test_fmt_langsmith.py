# ruff: noqa: E501  (fixture data is kept one record per line, as sources write it)
"""LangSmith: bulk-export Parquet runs (Hive layout) and run JSON, run trees,
invocation params, and feedback that arrives in a later object."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.ingest.objects import SourceObject, ingest_objects, settle_with_existing

ROOT, LLM, TOOL = (
    "01a22bbe-07ec-77b9-a564-fbbe66e08c91",
    "01a22bbe-0808-7916-9d79-8c44d02ea7fa",
    "01a22bbe-0900-7000-8000-000000000001",
)
LLM2 = "01a22bbe-0a00-7000-8000-000000000002"
DOTTED_ROOT = f"20261130T091643884362Z{ROOT}"
KEY = "exports/export_id=3c2f/tenant_id=9a1e/session_id=5d7b/runs/year=2026/month=11/day=30/part-0.parquet"


def _run(id_, run_type, start, dotted, **fields):
    base = {
        "id": id_, "tenant_id": "9a1e", "session_id": "5d7b", "trace_id": ROOT, "parent_run_id": None,
        "name": run_type, "run_type": run_type, "start_time": start, "end_time": start, "status": "success",
        "dotted_order": dotted, "inputs": "{}", "outputs": "{}", "error": None, "extra": "{}", "events": "[]",
        "tags": [], "feedback_stats": None, "feedbacks": None, "total_tokens": None, "prompt_tokens": None,
        "completion_tokens": None, "total_cost": None, "first_token_time": None,
    }  # fmt: skip
    return {**base, **fields}


def _rows():
    inputs = {"messages": [{"role": "system", "content": "You are a weather bot."}, {"role": "user", "content": "Weather in Paris?"}],
              "model": "claude-sonnet-4-5", "max_tokens": 256, "extra_body": {"temperature": 0.2},
              "tools": [{"name": "get_weather", "description": "Current weather for a city", "input_schema": {"type": "object"}}]}  # fmt: skip
    outputs = {"id": "msg_01Aq9w938a90dw8q", "model": "claude-sonnet-4-5-20250929", "stop_reason": "tool_use", "content": "Let me check.",
               "tool_calls": [{"id": "toolu_01A", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}],
               "usage_metadata": {"input_tokens": 1479, "output_tokens": 52, "total_tokens": 1531, "input_token_details": {"cache_creation": 1024}}}  # fmt: skip
    extra = {"metadata": {"ls_provider": "anthropic", "ls_model_name": "claude-sonnet-4-5", "ls_max_tokens": 256,
                          "session_id": "sess-42", "user_id": "u_123", "app_route": "weather"},
             "invocation_params": {"model": "claude-sonnet-4-5", "stop": ["\n\nHuman:"]}}  # fmt: skip
    turn2_inputs = {**inputs, "messages": [*inputs["messages"], {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": "15 C, sunny"}]}]}  # fmt: skip
    return [
        _run(ROOT, "chain", "2026-11-30T09:16:43.884362", DOTTED_ROOT, name="weather-agent"),
        _run(LLM, "llm", "2026-11-30T09:16:43.912477", f"{DOTTED_ROOT}.20261130T091643912477Z{LLM}",
             end_time="2026-11-30T09:16:43.947298", inputs=json.dumps(inputs), outputs=json.dumps(outputs), extra=json.dumps(extra),
             feedbacks=json.dumps([{"id": "fb-1", "key": "user_score", "score": 1, "comment": "spot on"}])),
        _run(TOOL, "tool", "2026-11-30T09:16:43.950000", f"{DOTTED_ROOT}.20261130T091643950000Z{TOOL}", name="get_weather",
             parent_run_id=ROOT, inputs=json.dumps({"input": {"city": "Paris"}, "tool_call_id": "toolu_01A"}),
             outputs=json.dumps({"output": "15 C, sunny"})),
        _run(LLM2, "llm", "2026-11-30T09:16:44.000000", f"{DOTTED_ROOT}.20261130T091644000000Z{LLM2}", parent_run_id=ROOT,
             inputs=json.dumps(turn2_inputs), outputs=json.dumps({"id": "msg_2", "model": "claude-sonnet-4-5-20250929",
             "stop_reason": "end_turn", "content": [{"type": "text", "text": "It is 15 C."}]}), extra=json.dumps(extra)),
    ]  # fmt: skip


def _parquet(rows) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    return buffer.getvalue()


def _ingest(*objects):
    now = datetime.now(UTC)
    return ingest_objects([SourceObject(k, k, "e", len(d), now, d) for k, d in objects], now.date(), "run", now)


def test_bulk_export_parquet_runs():
    batch = _ingest((KEY, _parquet(_rows())))
    calls = {c["span_id"]: c for c in batch.calls}
    assert set(calls) == {LLM, LLM2}
    call = calls[LLM]
    assert call["source_format"] == "langsmith" and call["trace_id"] == ROOT
    assert call["parent_span_id"] == ROOT, "the parent comes from dotted_order when parent_run_id is empty"
    assert call["system_text"] == "You are a weather bot." and [m["role"] for m in call["messages"]] == ["user"]
    assert call["tool_definitions"][0]["name"] == "get_weather"
    assert call["params"]["temperature"] == 0.2 and call["params"]["max_tokens"] == 256
    assert call["params"]["stop_sequences"] == ["\n\nHuman:"], "from extra.invocation_params"
    assert (call["request_model"], call["response_model"]) == ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929")
    parts = call["output_messages"][0]["parts"]
    assert [(p["type"], p.get("tool_call_id"), p.get("arguments_json")) for p in parts] == [
        ("text", None, None), ("tool_call", "toolu_01A", '{"city":"Paris"}'),
    ]  # fmt: skip
    assert (call["finish_reason"], call["stop_reason_native"], call["response_id"]) == (
        "tool_call",
        "tool_use",
        "msg_01Aq9w938a90dw8q",
    )
    assert call["usage"]["input_tokens"] == 455 and call["usage"]["cache_write_input_tokens"] == 1024
    assert (call["session_id"], call["user_id"]) == ("sess-42", "u_123")
    assert call["occurred_at"] == datetime(2026, 11, 30, 9, 16, 43, 912477, tzinfo=UTC)
    assert [(f["id"], f["name"], f["value_number"], f["comment"]) for f in call["feedback"]] == [
        ("fb-1", "user_score", 1.0, "spot on")
    ]
    assert json.loads(call["extra_json"])["extra"]["metadata"]["app_route"] == "weather"
    (tool,) = calls[LLM2]["tool_executions"]
    assert (tool["tool_call_id"], tool["arguments_json"], tool["result_json"]) == (
        "toolu_01A",
        '{"city":"Paris"}',
        '"15 C, sunny"',
    )
    assert sorted(s["kind"] for s in batch.spans) == ["chain", "llm_call", "llm_call", "tool"]


def test_run_json_and_feedback_arriving_later():
    first = _ingest(("runs/2026/11/30/runs.jsonl", "\n".join(json.dumps(r) for r in _rows()).encode()))
    stored = first.calls
    assert {c["span_id"] for c in stored} == {LLM, LLM2}
    feedback = {"id": "fb-2", "run_id": LLM2, "trace_id": ROOT, "key": "correctness", "score": 0, "comment": "wrong city",
                "feedback_source": {"type": "app"}, "created_at": "2026-11-30T10:00:00Z"}  # fmt: skip
    later = _ingest(("feedback/2026/11/30/fb.jsonl", json.dumps(feedback).encode()))
    assert not later.calls and len(later.fragments) == 1
    assert settle_with_existing(later, stored) == 1
    (updated,) = later.calls
    assert updated["span_id"] == LLM2
    assert [(f["id"], f["name"], f["value_number"], f["source"]) for f in updated["feedback"]] == [
        ("fb-2", "correctness", 0.0, "langsmith:app")
    ]
    again = _ingest(("feedback/2026/11/30/fb.jsonl", json.dumps(feedback).encode()))
    assert settle_with_existing(again, [updated]) == 0, "the same feedback merged twice is a no-op"
