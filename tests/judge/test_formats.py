"""agent_events from stored rows of the agent-log shapes agents really write: spans whose attributes keep
every payload field (event-sourced tool_name/http_status/error tools linked by parent id, no tool call id;
the flat structured log line with tool_success, semantic_error, agent_version, user_tier, feature_flag),
llm calls known only as spans (no calls row), and OpenTelemetry spans with nested attributes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pyarrow as pa

from pipelines.judge import state
from pipelines.judge.events import event_rows
from pipelines.judge.timeline import build_traces
from pipelines.record.canonical import canonical_json
from pipelines.record.rows import finalize_span, new_span
from pipelines.record.schema import AGENT_EVENTS

T0 = datetime(2026, 11, 29, 10, tzinfo=UTC)


def _span(trace: str, step: int | None, kind: str, attributes: dict, fmt: str = "agent_events", **cols) -> dict:
    return finalize_span(
        new_span(
            trace_id=trace,
            span_id=f"{trace}-{step if step is not None else cols.get('name')}",
            session_id=f"s-{trace}",
            source_format=fmt,
            kind=kind,
            name=cols.pop("name", kind),
            step_index=step,
            occurred_at=T0 + timedelta(seconds=step if step is not None else cols.pop("second", 0)),
            attributes_json=canonical_json(attributes),
            **cols,
        )
    )


def _events(spans: list[dict]) -> pl.DataFrame:
    rows = event_rows(build_traces(spans, []))
    pa.Table.from_pylist(rows, schema=AGENT_EVENTS)  # the rows fit the table's schema
    return pl.DataFrame(rows, schema=pl.from_arrow(AGENT_EVENTS.empty_table()).schema).sort("trace_id", "step_index")


def test_flat_log_lines_fill_the_agent_log_columns_and_keep_the_logged_semantic_error():
    def line(step, event_type, **fields):
        return {"event_type": event_type, "agent_version": "v7", "user_tier": "free", "feature_flag": "new_planner",
                "model": "claude-haiku-4-5", "provider": "anthropic", "semantic_error": False, **fields}  # fmt: skip

    spans = [
        _span("ft", 0, "session_start", line(0, "session_start")),
        _span("ft", 1, "llm_call", line(1, "llm_call"), input_tokens=200, output_tokens=50, cost_usd=0.001),
        _span(
            "ft", 2, "tool", line(2, "tool_call", tool_called="search_kb", tool_success=False), tool_name="search_kb"
        ),
        _span("ft", 3, "llm_call", line(3, "llm_call", semantic_error=True), input_tokens=260, cost_usd=0.002),
        _span("ft", 4, "session_end", line(4, "session_end", total_tokens=510)),
    ]
    events = _events(spans)
    assert events["event_type"].to_list() == ["session.start", "llm.call", "tool.invoke", "llm.call", "session.end"]
    assert events["semantic_error"].to_list() == [None, None, None, "semantic_error", None]
    assert events["tool_success"].to_list() == [None, None, False, None, None]
    assert set(events["tool_called"].drop_nulls()) == {"search_kb"}
    assert (set(events["agent_version"]), set(events["user_tier"]), set(events["feature_flag"])) == (
        {"v7"},
        {"free"},
        {"new_planner"},
    )
    calls = events.filter(pl.col("event_type") == "llm.call")
    assert calls["model"].to_list() == ["claude-haiku-4-5"] * 2 and calls["provider"].to_list() == ["anthropic"] * 2
    assert calls["tokens_in"].to_list() == [200, 260] and calls["cost_usd"].sum() == 0.003
    assert events["session_total_tokens"].to_list()[-1] == 510


def test_event_sourced_tools_with_http_status_and_error_and_no_tool_call_id():
    spans = [
        _span("ev", 0, "session_start", {"agent_version": "2.3.1", "user_message": "where is A-1?"}),
        _span(
            "ev",
            1,
            "llm_call",
            {
                "model": "gpt-4o",
                "prompt": [{"role": "user", "content": "where is A-1?"}],
                "response": "Let me look that up.",
                "prompt_tokens": 120,
            },
        ),  # fmt: skip
        _span(
            "ev",
            2,
            "tool",
            {"tool_name": "lookup_order", "result": {"status": "ok"}, "http_status": 200},
            parent_span_id="ev-1",
        ),  # fmt: skip
        _span(
            "ev",
            3,
            "tool",
            {"tool_name": "carrier_status", "result": None, "error": "timeout", "http_status": 504},
            parent_span_id="ev-1",
            status="error",
        ),  # fmt: skip
        _span("ev", 4, "session_end", {"terminated": True, "reason": "max_steps"}),
    ]
    traces = build_traces(spans, [])
    events = _events(spans)
    assert events["tool_called"].to_list()[2:4] == ["lookup_order", "carrier_status"]
    assert events["tool_success"].to_list()[2:4] == [True, False] and events["http_status"].to_list()[3] == 504
    assert events["parent_event_id"].to_list()[3] == "ev-1" and set(events["agent_version"]) == {"2.3.1"}
    assert events.filter(pl.col("step_index") == 1)[["model", "tokens_in"]].row(0) == ("gpt-4o", 120)
    assert traces[0].steps[1].text == "Let me look that up." and state.validate(traces[0]) == []


def test_otel_spans_without_step_numbers_are_ordered_by_time_with_nested_attributes():
    tool = {"attributes": {"gen_ai.tool.name": "search", "gen_ai.tool.call.id": "c1",
                           "gen_ai.tool.call.result": "[]", "error.type": None}}  # fmt: skip
    spans = [
        _span("ot", None, "tool", tool, fmt="otlp_json", name="execute_tool search", second=2, tool_name="search"),
        _span(
            "ot",
            None,
            "llm_call",
            {"attributes": {"gen_ai.request.model": "claude-sonnet-4-5"}},
            fmt="otlp_json",
            name="chat",
            second=1,
        ),  # fmt: skip
    ]
    (trace,) = build_traces(spans, [])
    assert [(s.step_index, s.event_type) for s in trace.steps] == [(0, "llm.call"), (1, "tool.invoke")]
    tool_step = trace.steps[1]
    assert (tool_step.tool_called, tool_step.tool_call_id, tool_step.tool_result, tool_step.tool_success) == (
        "search",
        "c1",
        [],
        True,
    )
    assert _events(spans)["source_step_index"].null_count() == 2
