"""agent_events from the agent-log shapes agents really write (event-sourced payloads with prompt arrays and
tool_name/http_status/error tools; the flat structured log line), read from stored spans and calls."""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from pipelines.formats import normalize_object
from pipelines.judge import heuristics, state
from pipelines.judge.events import event_rows
from pipelines.judge.timeline import build_traces
from pipelines.record.schema import AGENT_EVENTS
from tests.formats.test_fmt_agent_logs import SOURCE, _flat_session, _lines, _session


def _events(data: bytes):
    _, out = normalize_object(data, SOURCE)
    assert out.problems == []
    traces = build_traces(out.spans, out.calls)
    rows = event_rows(traces)
    pa.Table.from_pylist(rows, schema=AGENT_EVENTS)  # the rows fit the table's schema
    return traces, pl.DataFrame(rows, schema=pl.from_arrow(AGENT_EVENTS.empty_table()).schema)


def test_event_sourced_payloads_fill_the_agent_log_columns():
    traces, events = _events(_lines(_session(1)))
    by_step = {r["step_index"]: r for r in events.to_dicts()}
    assert [by_step[i]["event_type"] for i in range(6)] == [
        "session.start", "llm.call", "tool.invoke", "tool.invoke", "llm.call", "session.end",
    ]  # fmt: skip
    assert (by_step[1]["model"], by_step[1]["provider"], by_step[1]["tokens_in"], by_step[1]["tokens_out"]) == (
        "gpt-4o",
        "openai",
        120,
        30,
    )
    assert by_step[1]["cost_usd"] == 0.004 and by_step[1]["latency_ms"] == 850.0
    assert (by_step[2]["tool_called"], by_step[2]["tool_success"]) == ("lookup_order", True)
    assert (by_step[3]["tool_called"], by_step[3]["tool_success"], by_step[3]["http_status"]) == (
        "carrier_status",
        False,
        504,
    )
    assert by_step[3]["parent_event_id"] == "s1-e1"
    assert set(events["agent_version"]) == {"2.3.1"}
    assert state.validate(traces[0]) == []


def test_flat_log_lines_fill_the_agent_log_columns_and_keep_the_logged_semantic_error():
    traces, events = _events(_lines(_flat_session(1) + _flat_session(2)))
    two = events.filter(pl.col("trace_id") == "ft-2").sort("step_index")
    assert two["event_type"].to_list() == ["session.start", "llm.call", "tool.invoke", "llm.call", "session.end"]
    assert two["semantic_error"].to_list() == [None, None, None, "semantic_error", None]
    assert two["tool_success"].to_list()[2] is False and two["tool_called"][2] == "search_kb"
    assert set(two["user_tier"]) == {"free"} and set(two["feature_flag"]) == {"new_planner"}
    assert set(two["agent_version"]) == {"v7"}
    calls = two.filter(pl.col("event_type") == "llm.call")
    assert calls["model"].to_list() == ["claude-haiku-4-5"] * 2 and calls["provider"].to_list() == ["anthropic"] * 2
    assert calls["tokens_in"].to_list() == [200, 260] and calls["cost_usd"].sum() == 0.003
    assert events.filter(pl.col("trace_id") == "ft-1")["semantic_error"].null_count() == 5
    # claude-haiku-4-5 is in the model-info table: context_overflow can check these calls
    assert heuristics.unknown_models(traces) == []
