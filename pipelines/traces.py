"""The `traces` rollup: one row per trace (an agent session, or the calls that
share a trace id), computed from its calls and spans.

A trace is rolled up on the day it started. Its spans may cross midnight, so
the asset hands in the calls and spans of the day before and after as well,
and only traces whose first span falls on the day are kept.
"""

from __future__ import annotations

import json
from datetime import date, datetime

import polars as pl

from pipelines.record.canonical import record_sha256

NEGATIVE_LABELS = ("down", "thumbs_down", "negative", "bad", "unhelpful")


def negative_feedback(feedback: pl.Expr) -> pl.Expr:
    """True when any feedback item is a thumbs-down: a negative label, or a
    thumbs score at or below zero."""
    item = pl.element()
    # thumbs scores come as "thumbs" (1 / -1), Langfuse's "user_thumbs" (1 / 0), booleans...
    thumbs = item.struct.field("name").str.to_lowercase().str.contains("thumb")
    is_negative = item.struct.field("value_string").str.to_lowercase().is_in(NEGATIVE_LABELS) | (
        thumbs & (item.struct.field("value_number") <= 0)
    )
    return feedback.list.eval(is_negative.fill_null(False)).list.any().fill_null(False)


def _session_attributes(spans: pl.DataFrame, kind: str) -> dict[str, dict]:
    rows = spans.filter(pl.col("kind") == kind).select("trace_id", "attributes_json").to_dicts()
    return {r["trace_id"]: json.loads(r["attributes_json"] or "{}") for r in rows}


def rollup(calls: pl.DataFrame, spans: pl.DataFrame, day: date, now: datetime) -> list[dict]:
    """`traces` rows for the traces that started on ``day``."""
    if spans.is_empty():
        return []
    span_totals = spans.group_by("trace_id").agg(
        pl.col("session_id").drop_nulls().first(),
        pl.col("user_id").drop_nulls().first().alias("span_user_id"),
        pl.col("source_format").first(),
        pl.col("occurred_at").min().alias("started_at"),
        pl.max_horizontal(pl.col("ended_at").max(), pl.col("occurred_at").max()).alias("ended_at"),
        pl.len().alias("span_count"),
        pl.col("kind").is_in(["llm_call", "tool", "think", "state"]).sum().alias("step_count"),
        (pl.col("kind") == "tool").sum().alias("tool_call_count"),
        ((pl.col("status") == "error") & (pl.col("kind") != "llm_call")).sum().alias("span_errors"),
    )
    call_totals = calls.group_by("trace_id").agg(
        pl.col("user_id").drop_nulls().first(),
        pl.col("service").drop_nulls().first(),
        pl.col("environment").drop_nulls().first(),
        pl.col("segment").drop_nulls().first(),
        pl.len().alias("call_count"),
        pl.col("usage").struct.field("input_tokens").sum(),
        pl.col("usage").struct.field("output_tokens").sum(),
        pl.col("usage").struct.field("total_tokens").sum(),
        pl.col("usage").struct.field("cost_usd").sum(),
        pl.coalesce("response_model", "request_model").drop_nulls().unique().sort().alias("models"),
        (pl.col("status") == "error").sum().alias("call_errors"),
        negative_feedback(pl.col("feedback")).any().alias("negative_feedback"),
        pl.col("escalated").fill_null(False).any().alias("escalated"),
    )
    joined = span_totals.join(call_totals, on="trace_id", how="left").filter(pl.col("started_at").dt.date() == day)
    starts = _session_attributes(spans, "session_start")
    ends = _session_attributes(spans, "session_end")
    out = []
    for r in joined.to_dicts():
        start, end = starts.get(r["trace_id"], {}), ends.get(r["trace_id"], {})
        errors = (r["call_errors"] or 0) + (r["span_errors"] or 0)
        escalated = bool(r["escalated"]) or end.get("outcome") == "escalated"
        negative = bool(r["negative_feedback"]) or str(end.get("feedback", "")).lower() in NEGATIVE_LABELS
        segment = r["segment"] or start.get("segment")
        row = {
            "trace_id": r["trace_id"],
            "session_id": r["session_id"],
            "user_id": r["user_id"] or r["span_user_id"] or start.get("user_id"),
            "source_format": r["source_format"],
            "service": r["service"] or start.get("service"),
            "environment": r["environment"] or start.get("environment"),
            "segment": _as_map(segment),
            "started_at": r["started_at"],
            "ended_at": r["ended_at"],
            "occurred_date": day,
            "duration_ms": (r["ended_at"] - r["started_at"]).total_seconds() * 1000.0,
            "call_count": r["call_count"] or 0,
            "span_count": r["span_count"],
            "step_count": r["step_count"],
            "tool_call_count": r["tool_call_count"],
            "input_tokens": r["input_tokens"],
            "output_tokens": r["output_tokens"],
            "total_tokens": r["total_tokens"],
            "cost_usd": r["cost_usd"],
            "models": r["models"] or [],
            "error_count": errors,
            "outcome": end.get("outcome") or ("error" if errors else ("escalated" if escalated else "ok")),
            "negative_feedback": negative,
            "escalated": escalated,
        }
        row["record_sha256"] = record_sha256(row, ())
        row["rolled_up_at"] = now
        out.append(row)
    return out


def _as_map(segment) -> dict[str, str] | None:
    """polars reads Delta maps as lists of {key, value}; the schema wants a mapping."""
    if segment is None:
        return None
    if isinstance(segment, dict):
        return {str(k): str(v) for k, v in segment.items()}
    return {item["key"]: item["value"] for item in segment}
