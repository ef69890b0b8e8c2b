"""Agent logs as agents write them: the event-sourced payloads (prompt arrays,
tool_name/http_status tools, terminated sessions) and the flat structured log
line, interleaved across sessions and out of order, become calls, spans and
traces with their totals; every field the source sent is recoverable."""

import json
import random
from datetime import UTC, date, datetime

import polars as pl
import pyarrow as pa

from pipelines.formats import detect, normalize_object
from pipelines.formats.base import SourceRef
from pipelines.ingest.traces import rollup
from pipelines.record.schema import CALLS, SPANS

DAY = date(2026, 11, 29)
SOURCE = SourceRef(uri="/raw/2026/11/29/agent.jsonl", key="2026/11/29/agent.jsonl", etag="e")
TRUNCATED = "x" * 4096 + "...[truncated]"


def _at(session: int, step: int) -> str:
    return f"2026-11-29T10:{session:02d}:{step:02d}Z"


def _event(session: int, step: int, event_type: str, payload: dict, parent: str | None = None) -> dict:
    return {
        "event_id": f"s{session}-e{step}",
        "session_id": f"sess-{session}",
        "trace_id": f"tr-{session}",
        "step_index": step,
        "timestamp": _at(session, step),
        "event_type": event_type,
        "payload": payload,
        "parent_event_id": parent,
    }


def _session(n: int) -> list[dict]:
    """One agent session in the event-sourced shape agents emit."""
    prompt = [
        {"role": "system", "content": "You are the order assistant of Loja Aurora."},
        {"role": "user", "content": f"where is order A-{n}?"},
    ]
    return [
        _event(n, 0, "session.start", {
            "user_message": f"where is order A-{n}?", "agent_version": "2.3.1", "model": "gpt-4o",
        }),
        _event(n, 1, "llm.call", {
            "model": "gpt-4o", "provider": "openai", "temperature": 0.2, "max_tokens": 512,
            "prompt_tokens": 120, "completion_tokens": 30, "cost_usd": 0.004, "latency_ms": 850.0,
            "prompt": prompt, "response": "Let me look that up.", "stop_reason": "tool_calls",
        }),
        _event(n, 2, "tool.invoke", {
            "tool_name": "lookup_order", "arguments": {"order_id": f"A-{n}"}, "result": TRUNCATED,
            "duration_ms": 120.0, "http_status": 200,
        }, parent=f"s{n}-e1"),
        _event(n, 3, "tool.invoke", {
            "tool_name": "carrier_status", "arguments": {"order_id": f"A-{n}"}, "result": None,
            "duration_ms": 30000.0, "error": "timeout", "http_status": 504,
        }, parent=f"s{n}-e1"),
        _event(n, 4, "llm.call", {
            "model": "gpt-4o", "provider": "openai", "temperature": 0.2, "max_tokens": 512,
            "prompt_tokens": 300, "completion_tokens": 40, "cost_usd": 0.006, "latency_ms": 900.0,
            "prompt": [*prompt, {"role": "assistant", "content": "Let me look that up."},
                       {"role": "tool", "content": TRUNCATED}],
            "response": "It shipped yesterday.", "stop_reason": "stop",
        }),
        _event(n, 5, "session.end", {"terminated": True, "reason": "max_steps", "total_steps": 5}),
    ]  # fmt: skip


def _lines(records: list[dict], seed: int = 7) -> bytes:
    shuffled = list(records)
    random.Random(seed).shuffle(shuffled)  # sessions interleaved, steps out of order
    return "\n".join(json.dumps(r) for r in shuffled).encode()


def _frames(out):
    calls = pl.from_arrow(pa.Table.from_pylist(out.calls, schema=CALLS))
    spans = pl.from_arrow(pa.Table.from_pylist(out.spans, schema=SPANS))
    return calls, spans


def test_event_sourced_payloads_become_calls_spans_and_traces():
    data = _lines(_session(1) + _session(2))
    assert detect(data) == "agent_events"
    fmt, out = normalize_object(data, SOURCE)
    assert out.problems == [] and out.records_read == 12
    assert len(out.calls) == 4 and len(out.spans) == 12

    call = next(c for c in out.calls if c["span_id"] == "s1-e1")
    assert call["system_text"] == "You are the order assistant of Loja Aurora."
    assert [m["role"] for m in call["messages"]] == ["user"] and call["output_text"] == "Let me look that up."
    assert call["provider"] == "openai" and call["request_model"] == "gpt-4o"
    assert (call["params"]["temperature"], call["params"]["max_tokens"]) == (0.2, 512)
    assert (call["usage"]["input_tokens"], call["usage"]["output_tokens"], call["usage"]["cost_usd"]) == (
        120,
        30,
        0.004,
    )
    assert call["latency_ms"] == 850.0 and call["stop_reason_native"] == "tool_calls"
    assert call["release"] == "2.3.1"  # session.start's agent_version

    # the tools the first call asked for (parent_event_id) fed the second call
    second = next(c for c in out.calls if c["span_id"] == "s1-e4")
    tools = {t["name"]: t for t in second["tool_executions"]}
    assert set(tools) == {"lookup_order", "carrier_status"}
    assert json.loads(tools["lookup_order"]["result_json"]) == TRUNCATED and not tools["lookup_order"]["is_error"]
    assert tools["carrier_status"]["is_error"] and tools["carrier_status"]["span_id"] == "s1-e3"

    spans = {s["span_id"]: s for s in out.spans}
    failed = spans["s1-e3"]
    assert failed["kind"] == "tool" and failed["status"] == "error" and failed["parent_span_id"] == "s1-e1"
    assert json.loads(failed["attributes_json"])["http_status"] == 504
    assert json.loads(spans["s1-e0"]["attributes_json"])["agent_version"] == "2.3.1"
    assert json.loads(spans["s1-e5"]["attributes_json"])["reason"] == "max_steps"

    traces = {t["trace_id"]: t for t in rollup(*_frames(out), DAY, datetime.now(UTC))}
    assert set(traces) == {"tr-1", "tr-2"}
    trace = traces["tr-1"]
    assert (trace["call_count"], trace["span_count"], trace["tool_call_count"]) == (2, 6, 2)
    assert (trace["input_tokens"], trace["output_tokens"]) == (420, 70) and abs(trace["cost_usd"] - 0.01) < 1e-9
    assert trace["outcome"] == "terminated" and trace["error_count"] == 2  # the failed tool, the terminated session
    assert trace["models"] == ["gpt-4o"]


def _flat(session: int, step: int, event_type: str, **fields) -> dict:
    return {
        "ts": _at(session, step),
        "session_id": f"flat-{session}",
        "trace_id": f"ft-{session}",
        "step_index": step,
        "event_type": event_type,
        "agent_version": "v7",
        "model": "claude-haiku-4-5",
        "provider": "anthropic",
        "tokens_in": None,
        "tokens_out": None,
        "cost_usd": None,
        "latency_ms": None,
        "tool_called": None,
        "tool_success": None,
        "semantic_error": False,
        "user_tier": "pro" if session == 1 else "free",
        "feature_flag": "new_planner",
        **fields,
    }


def _flat_session(n: int) -> list[dict]:
    return [
        _flat(n, 0, "session_start"),
        _flat(n, 1, "llm_call", tokens_in=200, tokens_out=50, cost_usd=0.001, latency_ms=400.0),
        _flat(n, 2, "tool_call", tool_called="search_kb", tool_success=n != 2, latency_ms=80.0, region="eu"),
        _flat(n, 3, "llm_call", tokens_in=260, tokens_out=70, cost_usd=0.002, latency_ms=500.0, semantic_error=n == 2),
        _flat(n, 4, "session_end"),
    ]


def test_flat_log_lines_become_spans_and_traces_with_totals():
    data = _lines(_flat_session(1) + _flat_session(2))
    assert detect(data) == "agent_log_lines"
    fmt, out = normalize_object(data, SOURCE)
    assert fmt == "agent_log_lines" and out.problems == [] and out.records_read == 10
    assert out.calls == []  # no prompt, no call
    assert sorted(s["kind"] for s in out.spans if s["trace_id"] == "ft-1") == sorted(
        ["session_start", "llm_call", "tool", "llm_call", "session_end"]
    )
    traces = {t["trace_id"]: t for t in rollup(*_frames(out), DAY, datetime.now(UTC))}
    one, two = traces["ft-1"], traces["ft-2"]
    assert (one["input_tokens"], one["output_tokens"], one["total_tokens"]) == (460, 120, 580)
    assert abs(one["cost_usd"] - 0.003) < 1e-9 and one["models"] == ["claude-haiku-4-5"]
    assert one["segment"] == {"user_tier": "pro", "feature_flag": "new_planner"} and one["error_count"] == 0
    assert two["error_count"] == 2 and two["outcome"] == "error"  # a failed tool and a semantic error
    assert (one["span_count"], one["step_count"], one["tool_call_count"]) == (5, 3, 1)

    # every field the source sent can be read back from the stored span
    tool = next(s for s in out.spans if s["trace_id"] == "ft-2" and s["kind"] == "tool")
    attributes = json.loads(tool["attributes_json"])
    assert tool["tool_name"] == "search_kb" and tool["status"] == "error" and tool["duration_ms"] == 80.0
    assert {k: attributes[k] for k in ("agent_version", "tool_success", "user_tier", "feature_flag", "region")} == {
        "agent_version": "v7",
        "tool_success": False,
        "user_tier": "free",
        "feature_flag": "new_planner",
        "region": "eu",
    }
    semantic = next(s for s in out.spans if s["trace_id"] == "ft-2" and s["step_index"] == 3)
    assert json.loads(semantic["attributes_json"])["semantic_error"] is True and semantic["status"] == "error"


def test_a_flat_line_with_a_prompt_is_also_a_call():
    line = _flat(
        1, 1, "llm_call", tokens_in=12, tokens_out=3, cost_usd=0.0001, latency_ms=300.0,
        prompt=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], response="Hello.",
    )  # fmt: skip
    fmt, out = normalize_object(json.dumps(line).encode(), SOURCE)
    assert out.problems == []
    (call,) = out.calls
    assert call["system_text"] == "Be brief." and call["output_text"] == "Hello."
    assert (call["usage"]["input_tokens"], call["usage"]["output_tokens"]) == (12, 3)
    assert call["release"] == "v7" and call["segment"] == {"user_tier": "pro", "feature_flag": "new_planner"}
    (span,) = out.spans
    assert span["call_id"] == call["call_id"] and json.loads(span["attributes_json"])["agent_version"] == "v7"


def test_bad_lines_of_either_shape_are_quarantined_by_line():
    events = _session(1)
    events[1]["payload"]["prompt"] = "not a message array"
    events[2]["payload"]["http_status"] = "ok"
    flat = _flat_session(1)
    flat[1]["tokens_in"] = "many"
    _, out = normalize_object("\n".join(json.dumps(e) for e in events).encode(), SOURCE)
    assert {p.line for p in out.problems} == {2, 3} and out.records_ingested == 4
    _, out = normalize_object("\n".join(json.dumps(e) for e in flat).encode(), SOURCE)
    assert [p.line for p in out.problems] == [2] and "tokens_in" in out.problems[0].message


def test_tracelake_payloads_with_a_template_reference_keep_working():
    payload = {
        "model": {"id": "claude-haiku-4-5"},
        "prompt": {"template_id": "support-answer", "version": "3"},  # a template reference, not messages
        "request": {"model": "claude-haiku-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
    }
    _, out = normalize_object(json.dumps(_event(1, 1, "llm.call", payload)).encode(), SOURCE)
    assert out.problems == []
    (call,) = out.calls
    assert (call["template_id"], call["template_version"]) == ("support-answer", "3")
