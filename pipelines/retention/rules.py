"""The always-keep rules, as the names of the rules each call or trace matches.

Call rules read only columns the sweep keeps (outcome, usage, latency,
segment, flags), so a decision made again after a sweep is the same one.
"""

from __future__ import annotations

import polars as pl

from pipelines.ingest.traces import negative_feedback
from pipelines.retention.policy import Policy
from pipelines.retention.segments import matches

# The calls columns a decision reads.
CALL_COLUMNS = (
    "call_id",
    "trace_id",
    "occurred_date",
    "service",
    "segment",
    "status",
    "feedback",
    "eval_score",
    "latency_ms",
    "usage",
    "escalated",
    "guardrail_hit",
    "flags",
)
TRACE_COLUMNS = ("trace_id", "error_count", "negative_feedback", "escalated")


def _rule(name: str, condition: pl.Expr) -> pl.Expr:
    return pl.when(condition.fill_null(False)).then(pl.lit(name))


def _reasons(rules: list[pl.Expr]) -> pl.Expr:
    if not rules:
        return pl.lit([], dtype=pl.List(pl.String))
    return pl.concat_list(rules).list.drop_nulls()


def _above_tail(column: pl.Expr, policy: Policy) -> pl.Expr:
    """Above the policy's percentile of the same route's values that day
    (routes with fewer than ``min_calls`` values that day have no tail)."""
    tail = policy.always_keep.tail
    day_route = ["service", "occurred_date"]
    threshold = column.quantile(tail.percentile / 100.0, interpolation="linear").over(day_route)
    return (column > threshold) & (column.count().over(day_route) >= tail.min_calls)


def call_reasons(policy: Policy) -> pl.Expr:
    """The rules each call matches (a list of names). Needs ``with_segments`` columns."""
    keep = policy.always_keep
    cost = pl.col("usage").struct.field("cost_usd")
    rules = [_rule("negative_feedback", negative_feedback(pl.col("feedback")))]
    if keep.errors:
        rules.append(_rule("error", pl.col("status") == "error"))
    if keep.eval_score_below is not None:
        rules.append(_rule("low_eval_score", pl.col("eval_score") < keep.eval_score_below))
    if keep.latency_ms_over is not None:
        rules.append(_rule("latency_over_limit", pl.col("latency_ms") > keep.latency_ms_over))
    if keep.cost_usd_over is not None:
        rules.append(_rule("cost_over_limit", cost > keep.cost_usd_over))
    if keep.tail is not None:
        rules.append(_rule("latency_tail", _above_tail(pl.col("latency_ms"), policy)))
        rules.append(_rule("cost_tail", _above_tail(cost, policy)))
    for segment in keep.segments:
        rules.append(_rule(f"segment:{segment.name}", matches(segment.match)))
    if keep.escalated:
        rules.append(_rule("escalated", pl.col("escalated")))
    if keep.guardrail_hit:
        rules.append(_rule("guardrail_hit", pl.col("guardrail_hit")))
    if keep.flagged:
        counted = pl.col("flags").list.eval(~pl.element().is_in(keep.ignore_flags)) if keep.ignore_flags else None
        rules.append(_rule("flagged", counted.list.any() if counted is not None else pl.col("flags").list.len() > 0))
    return _reasons(rules)


def trace_reasons(policy: Policy) -> pl.Expr:
    """The rules a `traces` row matches on its own: a session that ended with a
    thumbs-down, an error in any span (a failed tool), an escalated outcome."""
    keep = policy.always_keep
    rules = [_rule("negative_feedback", pl.col("negative_feedback"))]
    if keep.errors:
        rules.append(_rule("error", pl.col("error_count") > 0))
    if keep.escalated:
        rules.append(_rule("escalated", pl.col("escalated")))
    return _reasons(rules)
