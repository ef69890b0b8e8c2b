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


def _span_sum(column: str) -> pl.Expr:
    # model calls recorded without content (a flat log line) are spans of kind llm_call with no call;
    # other spans' tokens (an agent span's aggregate) would count the calls twice
    values = pl.col(column).filter(pl.col("call_id").is_null() & (pl.col("kind") == "llm_call"))
    return pl.when(values.is_not_null().any()).then(values.sum()).otherwise(None).alias(f"span_{column}")


def _first_attribute(name: str) -> pl.Expr:
    found = pl.col("attributes_json").str.json_path_match(f"$.{name}")
    return found.drop_nulls().first().alias(f"attribute_{name}")


def _total(*values):
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _outcome(end: dict, errors: int, escalated: bool) -> str:
    if end.get("outcome"):
        return end["outcome"]
    if end.get("terminated"):
        return "terminated"  # the agent was stopped (a step limit, a guard): not a success
    return "error" if errors else ("escalated" if escalated else "ok")


# The `calls` columns ``rollup`` reads: a day of calls read whole, text and all,
# costs four times as much (0.41 s against about 0.1 on the 40k-call day).
CALL_COLUMNS = (
    "trace_id", "user_id", "service", "environment", "segment", "usage",
    "response_model", "request_model", "status", "feedback", "escalated",
)  # fmt: skip


def rollup(calls: pl.DataFrame, spans: pl.DataFrame, day: date, now: datetime) -> list[dict]:
    """`traces` rows for the traces that started on ``day`` (``calls`` needs ``CALL_COLUMNS``)."""
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
        # a call's error is counted with the calls; an llm span without a call (a flat log line) counts here
        ((pl.col("status") == "error") & pl.col("call_id").is_null()).sum().alias("span_errors"),
        # tokens and cost of model calls known only as spans (flat agent logs): added to the calls' totals
        *(_span_sum(name) for name in ("input_tokens", "output_tokens", "cost_usd")),
        *(_first_attribute(name) for name in ("user_tier", "feature_flag", "model")),
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
        segment = r["segment"] or start.get("segment") or _flat_segment(r)
        span_tokens = _total(r["span_input_tokens"], r["span_output_tokens"])
        input_tokens = _total(r["input_tokens"], r["span_input_tokens"])
        output_tokens = _total(r["output_tokens"], r["span_output_tokens"])
        total_tokens = _total(r["total_tokens"], span_tokens)
        cost = _total(r["cost_usd"], r["span_cost_usd"])
        models = r["models"] or ([r["attribute_model"]] if r["attribute_model"] else [])
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
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            # a session.end that states its totals fills what no call or span counted
            "total_tokens": total_tokens if total_tokens is not None else _int_or_none(end.get("total_tokens")),
            "cost_usd": cost if cost is not None else _float_or_none(end.get("total_cost_usd")),
            "models": models,
            "error_count": errors,
            "outcome": _outcome(end, errors, escalated),
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


def _flat_segment(r: dict) -> dict[str, str] | None:
    segment = {k: r[f"attribute_{k}"] for k in ("user_tier", "feature_flag") if r[f"attribute_{k}"] is not None}
    return segment or None


def _int_or_none(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float_or_none(value) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
