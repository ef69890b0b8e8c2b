"""Coverage: per segment (route x user tier x language x input-length bucket),
how many calls were seen, kept in full, kept by a rule, kept by sampling, over
a window of days; a segment with no call kept in full is ``uncovered``: if a
bug lives there, no full trace of it is left to replay.
"""

from __future__ import annotations

from datetime import date, datetime

import polars as pl

from pipelines.retention.decide import FULL, SAMPLED, row_sha256

SEGMENT = ("service", "user_tier", "language", "input_bucket")
HASHED = (
    "window_end",
    "window_start",
    "segment_key",
    "calls_seen",
    "kept_full",
    "kept_by_rule",
    "kept_by_sampling",
    "mean_sampling_rate",
    "expected_full",
    "estimated_calls",
    "uncovered",
    "policy_version",
)


def coverage(decisions: pl.DataFrame, window_start: date, window_end: date, now: datetime) -> pl.DataFrame:
    """`retention_coverage` rows from the `retention` rows of a window, uncovered segments first."""
    full = pl.col("tier") == FULL
    sampled = full & pl.col("reasons").list.contains(SAMPLED)
    by_rule = full & ~pl.col("reasons").list.contains(SAMPLED)
    rows = (
        decisions.group_by(SEGMENT)
        .agg(
            pl.len().cast(pl.Int64).alias("calls_seen"),
            full.sum().cast(pl.Int64).alias("kept_full"),
            by_rule.sum().cast(pl.Int64).alias("kept_by_rule"),
            sampled.sum().cast(pl.Int64).alias("kept_by_sampling"),
            pl.col("sampling_rate").mean().alias("mean_sampling_rate"),
            (by_rule.cast(pl.Float64) + pl.when(by_rule).then(0.0).otherwise(pl.col("sampling_rate")))
            .sum()
            .alias("expected_full"),
            pl.when(full).then(1.0 / pl.col("keep_probability")).otherwise(0.0).sum().alias("estimated_calls"),
            pl.col("policy_version").sort().last(),
        )
        .with_columns(
            pl.lit(window_end).alias("window_end"),
            pl.lit(window_start).alias("window_start"),
            pl.concat_str([pl.col(c) for c in SEGMENT], separator="|").alias("segment_key"),
            (pl.col("kept_full") == 0).alias("uncovered"),
        )
    )
    rows = rows.with_columns(row_sha256(rows, HASHED), pl.lit(now).cast(pl.Datetime("us", "UTC")).alias("computed_at"))
    return rows.sort(["uncovered", "calls_seen"], descending=[True, True])


def markdown(rows: pl.DataFrame, limit: int = 25) -> str:
    """The segments as a markdown table for the asset's metadata: uncovered
    first, with what to do about them."""
    if rows.is_empty():
        return "_no calls in the window_"
    columns = ["service", "user_tier", "language", "input_bucket", "calls_seen", "kept_full", "kept_by_sampling"]
    lines = ["| " + " | ".join([*columns, "covered"]) + " |", "|" + "---|" * (len(columns) + 1)]
    for row in rows.head(limit).iter_rows(named=True):
        cells = [str(row[c]) for c in columns] + ["**no**" if row["uncovered"] else "yes"]
        lines.append("| " + " | ".join(cells) + " |")
    uncovered = int(rows["uncovered"].sum())
    if rows.height > limit:
        lines.append(f"\n_{rows.height - limit} more segments in the `retention_coverage` table._")
    if uncovered:
        lines.append(
            f"\n**{uncovered} segment(s) have no call kept in full.** To keep some, give them a higher rate "
            "under `strata.rates` in the retention policy (and bump its `version`)."
        )
    return "\n".join(lines)
