"""Retention decisions: which calls keep their full text past the hot window.

The unit is the trace (an agent session, or the calls sharing a trace id):
if any always-keep rule matches one of its calls, or the trace itself (a
session that ended with a thumbs-down), every call of the trace is kept in
full. Otherwise the trace is sampled: it is kept when ``u < rate``, where
``u`` is the first 8 bytes of ``sha256("<salt>:<trace_id>")`` read as a
big-endian integer over 2**64, and ``rate`` is the highest stratum rate among
its calls. The decision depends only on the data and the policy, so it is the
same on every re-run, and a trace sampled at one rate is also sampled at any
higher rate.

``keep_probability`` is the probability that the call is kept in full: 1 for
rule-kept calls, the trace's rate otherwise, so that a data team can weight
each full-kept call by ``1 / keep_probability`` (Horvitz-Thompson).
"""

from __future__ import annotations

import hashlib
from datetime import datetime

import polars as pl

from pipelines.record.draws import uniform
from pipelines.retention.policy import Policy
from pipelines.retention.rules import TRACE_COLUMNS, call_reasons, trace_reasons
from pipelines.retention.segments import stratum_rate, with_segments

FULL, INGREDIENTS = "full", "ingredients"
SAMPLED = "sampled"
REASONS = pl.List(pl.String)
# Decision content: a row is rewritten only when one of these changes.
HASHED = (
    "call_id",
    "trace_id",
    "occurred_date",
    "service",
    "user_tier",
    "language",
    "input_bucket",
    "tier",
    "reasons",
    "keep_probability",
    "sampling_rate",
    "policy_version",
    "policy_sha256",
    "swept_at",
)


# The columns and types of a decision (retention rows).
_OUTPUT_SCHEMA = {
    "call_id": pl.String,
    "trace_id": pl.String,
    "occurred_date": pl.Date,
    "service": pl.String,
    "user_tier": pl.String,
    "language": pl.String,
    "input_bucket": pl.String,
    "tier": pl.String,
    "reasons": REASONS,
    "keep_probability": pl.Float64,
    "sampling_rate": pl.Float64,
    "policy_version": pl.String,
    "policy_sha256": pl.String,
    "decided_at": pl.Datetime("us", "UTC"),
    "swept_at": pl.Datetime("us", "UTC"),
    "record_sha256": pl.String,
}


def sample_point(trace_ids: pl.Series, salt: str) -> pl.Series:
    """The trace's uniform draw in [0, 1), from a hash that no library upgrade changes."""
    values = [uniform(f"{salt}:{t}") for t in trace_ids]
    return pl.Series("u", values, dtype=pl.Float64)


def row_sha256(frame: pl.DataFrame, columns: tuple[str, ...] = HASHED) -> pl.Series:
    """sha256 of each row's decision content (stable across polars versions, unlike ``pl.Expr.hash``)."""
    parts = []
    for c in columns:
        text = pl.col(c).list.join(",") if frame.schema[c] == REASONS else pl.col(c).cast(pl.String)
        parts.append(text.fill_null("\x00"))
    joined = frame.select(pl.concat_str(parts, separator="|")).to_series()
    return pl.Series("record_sha256", [hashlib.sha256(t.encode()).hexdigest() for t in joined], dtype=pl.String)


def decide(
    calls: pl.DataFrame,
    traces: pl.DataFrame,
    policy: Policy,
    now: datetime,
    previous: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One `retention` row per call in ``calls``.

    ``calls`` needs ``rules.CALL_COLUMNS`` and should hold whole days (tail
    thresholds are per route and day) and whole traces (the calls of the day
    before and after, for traces that cross midnight). ``traces`` holds the
    `traces` rows of those traces, if any. ``previous`` (call_id, swept_at)
    carries the sweep's mark over from earlier decisions.
    """
    if calls.is_empty():
        return pl.DataFrame(schema=_OUTPUT_SCHEMA)
    calls = with_segments(calls, policy).with_columns(
        call_reasons(policy).alias("own"), stratum_rate(policy).alias("rate")
    )
    per_trace = calls.group_by("trace_id").agg(
        pl.col("own").list.explode(keep_nulls=False, empty_as_null=False).unique().alias("from_calls"),
        pl.col("rate").max(),
    )
    trace_rows = traces.select(TRACE_COLUMNS).unique("trace_id") if not traces.is_empty() else None
    if trace_rows is not None:
        own_trace = trace_rows.select("trace_id", trace_reasons(policy).alias("from_trace"))
        per_trace = per_trace.join(own_trace, on="trace_id", how="left")
    else:
        per_trace = per_trace.with_columns(pl.lit([], dtype=REASONS).alias("from_trace"))
    per_trace = (
        per_trace.with_columns(
            pl.concat_list(pl.col("from_calls"), pl.col("from_trace").fill_null(pl.lit([], dtype=REASONS)))
            .list.unique()
            .list.sort()
            .alias("trace_reasons"),
            sample_point(per_trace["trace_id"], policy.sampling_salt).alias("u"),
        )
        .with_columns(
            (pl.col("trace_reasons").list.len() > 0).alias("by_rule"),
        )
        .with_columns(
            (~pl.col("by_rule") & (pl.col("u") < pl.col("rate"))).alias("sampled"),
        )
    )

    decided = calls.drop("rate").join(
        per_trace.select("trace_id", "rate", "trace_reasons", "by_rule", "sampled"), on="trace_id"
    )
    inherited = (
        pl.col("trace_reasons")
        .list.set_difference(pl.col("own"))
        .list.sort()
        .list.eval(pl.lit("trace:") + pl.element())
    )
    sampled = pl.when(pl.col("sampled")).then(pl.lit([SAMPLED], dtype=REASONS)).otherwise(pl.lit([], dtype=REASONS))
    out = decided.select(
        "call_id",
        "trace_id",
        "occurred_date",
        "service",
        "user_tier",
        "language",
        "input_bucket",
        pl.when(pl.col("by_rule") | pl.col("sampled")).then(pl.lit(FULL)).otherwise(pl.lit(INGREDIENTS)).alias("tier"),
        pl.concat_list(pl.col("own").list.sort(), inherited, sampled).alias("reasons"),
        pl.when(pl.col("by_rule")).then(pl.lit(1.0)).otherwise(pl.col("rate")).alias("keep_probability"),
        pl.col("rate").alias("sampling_rate"),
        pl.lit(policy.policy_version).alias("policy_version"),
        pl.lit(policy.sha256).alias("policy_sha256"),
        pl.lit(now).cast(pl.Datetime("us", "UTC")).alias("decided_at"),
    )
    swept = (
        previous.select("call_id", "swept_at")
        if previous is not None and not previous.is_empty()
        else pl.DataFrame(schema={"call_id": pl.String, "swept_at": pl.Datetime("us", "UTC")})
    )
    out = out.join(swept.unique("call_id"), on="call_id", how="left")
    return out.with_columns(row_sha256(out)).select(_OUTPUT_SCHEMA.keys())
