"""The segment of a call (route x user tier x language x input-length bucket)
and the sampling rate of its stratum.

Every value here comes from columns the sweep keeps (service, segment,
usage), so deciding again after a sweep lands on the same segment and rate.
"""

from __future__ import annotations

import polars as pl

from pipelines.retention.policy import UNKNOWN, Match, Policy

# route is calls.service; the other dimensions are columns added by with_segments
DIMENSION_COLUMNS = {
    "route": "service",
    "user_tier": "user_tier",
    "language": "language",
    "input_bucket": "input_bucket",
}


def segment_value(key: str, segment: pl.Expr | None = None) -> pl.Expr:
    """``calls.segment[key]``: a Delta map read by polars is a Map column."""
    return (segment if segment is not None else pl.col("segment")).map.get(key)


def input_tokens() -> pl.Expr:
    """Every input token the model read: uncached, cache reads and cache writes."""
    usage = pl.col("usage")
    return usage.struct.field("input_tokens") + pl.sum_horizontal(
        usage.struct.field("cache_read_input_tokens").fill_null(0),
        usage.struct.field("cache_write_input_tokens").fill_null(0),
    )


def input_bucket(policy: Policy) -> pl.Expr:
    """The input-length bucket label: the first bucket whose upper edge is above the token count."""
    edges = policy.strata.input_length_buckets
    labels = policy.strata.bucket_labels()
    tokens = input_tokens()
    bucket = pl.lit(labels[-1])
    for edge, label in reversed(list(zip(edges, labels, strict=False))):
        bucket = pl.when(tokens < edge).then(pl.lit(label)).otherwise(bucket)
    return pl.when(tokens.is_null()).then(pl.lit(UNKNOWN)).otherwise(bucket)


def with_segments(calls: pl.DataFrame, policy: Policy) -> pl.DataFrame:
    """``calls`` with user_tier, language, input_tokens and input_bucket columns;
    absent values are ``unknown`` so that every call belongs to a segment."""
    return calls.with_columns(
        pl.col("service").fill_null(UNKNOWN),
        segment_value("user_tier").fill_null(UNKNOWN).alias("user_tier"),
        segment_value("language").fill_null(UNKNOWN).alias("language"),
        input_tokens().alias("input_tokens"),
        input_bucket(policy).alias("input_bucket"),
    )


def matches(match: Match) -> pl.Expr:
    """True where a call (after ``with_segments``) matches every key of ``match``."""
    conditions = []
    for key, wanted in match.items():
        values = [wanted] if isinstance(wanted, str) else list(wanted)
        column = pl.col(DIMENSION_COLUMNS[key]) if key in DIMENSION_COLUMNS else segment_value(key)
        conditions.append(column.is_in(values).fill_null(False))
    return pl.all_horizontal(conditions)


def stratum_rate(policy: Policy) -> pl.Expr:
    """The sampling rate of each call's stratum: the first matching entry of
    ``strata.rates``, else the base rate."""
    rate = pl.lit(policy.base_rate)
    for entry in reversed(policy.strata.rates):
        rate = pl.when(matches(entry.match)).then(pl.lit(entry.rate)).otherwise(rate)
    return rate.cast(pl.Float64)
