"""`agent_events` rows: every step of every trace in the structured agent-log shape.

The table holds ids, numbers and flags only, never text (the text stays in
`calls` and `spans`, where retention sweeps it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipelines.judge.timeline import Trace
from pipelines.record.canonical import record_sha256

LEADING = (
    "ts",
    "session_id",
    "trace_id",
    "step_index",
    "event_type",
    "agent_version",
    "model",
    "provider",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "latency_ms",
    "tool_called",
    "tool_success",
    "semantic_error",
    "user_tier",
    "feature_flag",
)


def event_rows(traces: Iterable[Trace]) -> list[dict[str, Any]]:
    rows = []
    for trace in traces:
        for s in trace.steps:
            row = {
                "ts": s.ts,
                "session_id": s.session_id or trace.session_id,
                "trace_id": s.trace_id,
                "step_index": s.step_index,
                "event_type": s.event_type,
                "agent_version": s.agent_version,
                "model": s.model,
                "provider": s.provider,
                "tokens_in": s.tokens_in,
                "tokens_out": s.tokens_out,
                "cost_usd": s.cost_usd,
                "latency_ms": s.latency_ms,
                "tool_called": s.tool_called,
                "tool_success": s.tool_success if s.event_type == "tool.invoke" else None,
                "semantic_error": s.semantic_error,
                "user_tier": s.user_tier,
                "feature_flag": s.feature_flag,
                "event_key": s.span_key,
                "event_id": s.span_id,
                "parent_event_id": s.parent_span_id,
                "call_id": s.call_id,
                "source_format": s.source_format,
                "service": s.service or trace.service,
                "status": s.status,
                "finish_reason": s.finish_reason,
                "http_status": s.http_status,
                "source_step_index": s.raw_step_index,
                "session_total_tokens": s.reported_total_tokens,
                "occurred_date": s.ts.date(),
            }
            row["record_sha256"] = record_sha256(row, ())
            rows.append(row)
    return rows
