"""Agent event logs: every event a span, llm.call events calls fed by their tool results, sessions rolled up."""

import json
from datetime import UTC, date, datetime

import polars as pl
import pyarrow as pa

from pipelines.formats import agent_events
from pipelines.formats.base import SourceRef
from pipelines.ingest.traces import CALL_COLUMNS, rollup
from pipelines.record.schema import CALLS, SPANS

SOURCE = SourceRef(uri="/raw/year=2026/month=11/day=29/agent/01.jsonl", key="k", etag="e")
T = "2026-11-29T10:00:0{}Z"


def _event(step, event_type, payload, event_id=None, parent=None):
    return {
        "event_id": event_id or f"e{step}",
        "session_id": "s1",
        "trace_id": "t1",
        "step_index": step,
        "timestamp": T.format(step),
        "event_type": event_type,
        "payload": payload,
        "parent_event_id": parent,
    }


REQUEST_1 = {
    "model": "claude-sonnet-4-5-20250929",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "refund A-1"}],
}
TOOL_USE = {"type": "tool_use", "id": "toolu_9", "name": "lookup_order", "input": {"order_id": "A-1"}}
REQUEST_2 = {
    **REQUEST_1,
    "messages": [
        *REQUEST_1["messages"],
        {"role": "assistant", "content": [TOOL_USE]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "delivered"}]},
    ],
}


def _llm(request, content, stop, cost):
    return {
        "model": {"id": "claude-sonnet-4-5-20250929"},
        "request": request,
        "response": {
            "id": f"msg_{cost}",
            "content": content,
            "stop_reason": stop,
            "usage": {"input_tokens": 10, "output_tokens": 4},
        },
        "cost_usd": cost,
    }


SESSION = [
    _event(0, "session.start", {"user_id": "u-7", "service": "agent.orders", "segment": {"user_tier": "vip"}}),
    _event(1, "llm.call", _llm(REQUEST_1, [TOOL_USE], "tool_use", 0.01), parent="e0"),
    _event(
        2,
        "tool.invoke",
        {
            "tool_call_id": "toolu_9",
            "name": "lookup_order",
            "arguments": {"order_id": "A-1"},
            "result": {"status": "delivered"},
            "duration_ms": 120.0,
        },
        parent="e0",
    ),
    _event(3, "agent.think", {"text": "within limit"}, parent="e0"),
    _event(4, "state.mutate", {"key": "orders/A-1/refund", "value": 10}, parent="e0"),
    _event(5, "llm.call", _llm(REQUEST_2, [{"type": "text", "text": "Refunded."}], "end_turn", 0.02), parent="e0"),
    _event(6, "session.end", {"outcome": "success", "feedback": "down"}),
]


def _data(events):
    # lines out of order on purpose: a session's events need not arrive sorted
    return "\n".join(json.dumps(e) for e in reversed(events)).encode()


def test_every_event_is_a_span_and_llm_calls_are_calls():
    out = agent_events.normalize(_data(SESSION), SOURCE)
    assert out.problems == [] and out.records_read == 7
    assert sorted(s["kind"] for s in out.spans) == sorted(
        ["session_start", "llm_call", "tool", "think", "state", "llm_call", "session_end"]
    )
    assert len(out.calls) == 2
    first, second = sorted(out.calls, key=lambda c: c["occurred_at"])
    # the session's start supplies user, service and segment to its calls
    assert first["user_id"] == "u-7" and first["service"] == "agent.orders" and first["segment"] == {"user_tier": "vip"}
    assert first["span_id"] == "e1" and first["parent_span_id"] == "e0" and first["session_id"] == "s1"
    assert first["finish_reason"] == "tool_call" and "tool_results" not in first["capture_missing"]
    # the second call was fed by the lookup: its tool execution is attached
    (execution,) = second["tool_executions"]
    assert execution["tool_call_id"] == "toolu_9" and json.loads(execution["result_json"]) == {"status": "delivered"}
    tool_span = next(s for s in out.spans if s["kind"] == "tool")
    assert tool_span["tool_name"] == "lookup_order" and tool_span["duration_ms"] == 120.0
    assert {s["step_index"] for s in out.spans} == set(range(7))


def test_a_session_rolls_up_to_one_trace():
    out = agent_events.normalize(_data(SESSION), SOURCE)
    calls = pl.from_arrow(pa.Table.from_pylist(out.calls, schema=CALLS))
    spans = pl.from_arrow(pa.Table.from_pylist(out.spans, schema=SPANS))
    now = datetime.now(UTC)
    (trace,) = rollup(calls, spans, date(2026, 11, 29), now)
    # the traces asset reads only the columns rollup needs: the same trace from them
    assert rollup(calls.select(CALL_COLUMNS), spans, date(2026, 11, 29), now) == [trace]
    assert trace["trace_id"] == "t1" and trace["user_id"] == "u-7" and trace["service"] == "agent.orders"
    assert (trace["call_count"], trace["span_count"], trace["step_count"], trace["tool_call_count"]) == (2, 7, 5, 1)
    assert trace["input_tokens"] == 20 and trace["output_tokens"] == 8 and abs(trace["cost_usd"] - 0.03) < 1e-9
    assert trace["outcome"] == "success" and trace["negative_feedback"] is True
    assert trace["duration_ms"] == 6000.0 and trace["segment"] == {"user_tier": "vip"}


def test_bad_events_are_reported_by_line_without_their_content():
    secret = "maria.silva@example.com"
    lines = [
        json.dumps(SESSION[0]),
        json.dumps({**SESSION[3], "event_type": "agent.dream", "payload": {"text": secret}}),
        json.dumps({**SESSION[3], "event_id": ""}),
        json.dumps({**SESSION[3], "step_index": "third"}),
        json.dumps(["not", "an", "event", secret]),
        '{"event_id": "e9", "payload": "' + secret,
    ]
    out = agent_events.normalize("\n".join(lines).encode(), SOURCE)
    assert out.records_read == 6 and out.records_quarantined == 5 and len(out.spans) == 1
    by_line = {p.line: p for p in out.problems}
    assert by_line[2].error_class == "invalid_record" and "event_type" in by_line[2].message
    assert "event_id" in by_line[3].message and "step_index" in by_line[4].message
    assert by_line[5].error_class == "wrong_type" and by_line[6].error_class == "invalid_json"
    assert all(secret not in p.message for p in out.problems)
