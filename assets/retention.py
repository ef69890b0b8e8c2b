"""Retention stage: a decision per call, coverage per segment, and the sweep
that removes the text of the ingredients tier after the hot window.

`retention` and `retention_coverage` are daily assets; the sweep is a job on
its own schedule (it rewrites old partitions of `calls` and `spans`, which is
maintenance, not a new materialization of them).
"""

from collections import Counter
from datetime import UTC, date, datetime, timedelta

import dagster as dg
import polars as pl
from pydantic import Field

from assets.reporting import merge_metadata, preview
from pipelines.automation import after_nightly_load
from pipelines.partitions import daily, day_of
from pipelines.resources.policies import RetentionPolicy
from pipelines.resources.warehouse import Warehouse
from pipelines.retention.coverage import coverage, markdown
from pipelines.retention.decide import FULL, SAMPLED
from pipelines.retention.inputs import decide_day
from pipelines.retention.sweep import sweep


def _reason_table(rows: pl.DataFrame) -> dg.MetadataValue:
    counts = Counter(reason for reasons in rows["reasons"].to_list() for reason in reasons)
    if not counts:
        return dg.MetadataValue.md("_no reasons_")
    lines = ["| reason | calls |", "|---|---|", *(f"| {r} | {n} |" for r, n in counts.most_common())]
    return dg.MetadataValue.md("\n".join(lines))


# A multi-asset for its op name: the op of an asset keyed `retention` would be
# named `retention` too, and clash with the `retention` stage job.
@dg.multi_asset(
    name="decide_retention",
    specs=[
        dg.AssetSpec(
            "retention",
            deps=["calls", "traces"],
            kinds={"delta"},
            group_name="retention",
            automation_condition=after_nightly_load(),
            description="One row per call: tier (full or ingredients), every rule that matched, keep probability, "
            "policy.",
        )
    ],
    partitions_def=daily,
    pool="warehouse",
)
def retention(
    context: dg.AssetExecutionContext, warehouse: Warehouse, retention_policy: RetentionPolicy
) -> dg.MaterializeResult:
    day = day_of(context)
    policy = retention_policy.load()
    rows = decide_day(warehouse, day, policy, datetime.now(UTC))
    # calls that are gone (a replaced source object, an erasure) lose their decision too
    result = warehouse.merge("retention", rows, partitions=[day], replace=pl.col("occurred_date") == day)
    full = rows.filter(pl.col("tier") == FULL)
    sampled = full.filter(pl.col("reasons").list.contains(SAMPLED)).height
    context.log.info(f"{day}: {rows.height} calls decided, {full.height} kept in full ({sampled} sampled)")
    return dg.MaterializeResult(
        asset_key="retention",
        metadata={
            **merge_metadata(result, warehouse, pl.col("occurred_date") == day),
            "calls": rows.height,
            "kept_full": full.height,
            "kept_by_rule": full.height - sampled,
            "kept_by_sampling": sampled,
            "ingredients_only": rows.height - full.height,
            "policy_version": policy.policy_version,
            "policy_sha256": policy.sha256,
            "reasons": _reason_table(rows),
            "preview": preview(rows.to_dicts(), ["service", "user_tier", "tier", "keep_probability", "reasons"]),
        },
    )


@dg.asset(
    deps=["retention"],
    partitions_def=daily,
    kinds={"delta"},
    group_name="retention",
    pool="warehouse",
    automation_condition=after_nightly_load(),
    description="Per segment (route x user tier x language x input length) over the policy's window ending on the "
    "day: calls seen, kept in full, sampled; segments with no call kept in full are flagged.",
)
def retention_coverage(
    context: dg.AssetExecutionContext, warehouse: Warehouse, retention_policy: RetentionPolicy
) -> dg.MaterializeResult:
    day = day_of(context)
    policy = retention_policy.load()
    start = day - timedelta(days=policy.coverage.window_days - 1)
    decisions = warehouse.read("retention", pl.col("occurred_date").is_between(start, day))
    rows = coverage(decisions, start, day, datetime.now(UTC))
    result = warehouse.merge("retention_coverage", rows, partitions=[day], replace=pl.col("window_end") == day)
    uncovered = int(rows["uncovered"].sum()) if rows.height else 0
    context.log.info(f"{start}..{day}: {rows.height} segments, {uncovered} with no call kept in full")
    return dg.MaterializeResult(
        metadata={
            **merge_metadata(result, warehouse, pl.col("window_end") == day),
            "window": f"{start}..{day}",
            "segments": rows.height,
            "uncovered_segments": uncovered,
            "calls_seen": int(rows["calls_seen"].sum()) if rows.height else 0,
            "coverage": dg.MetadataValue.md(markdown(rows)),
        }
    )


class SweepConfig(dg.Config):
    today: str | None = Field(default=None, description="Sweep as of this day, YYYY-MM-DD (default: today, UTC)")


@dg.op(pool="warehouse")
def sweep_expired_text(
    context: dg.OpExecutionContext, config: SweepConfig, warehouse: Warehouse, retention_policy: RetentionPolicy
) -> None:
    """Decide again, then remove the full text of ingredients-tier calls past the hot window, and free the bytes."""
    now = datetime.now(UTC)
    today = date.fromisoformat(config.today) if config.today else now.date()
    report = sweep(warehouse, retention_policy.load(), today, now, progress=context.log.info)
    context.log.info(
        f"swept {len(report.days)} days: {report.calls_stripped} calls and {report.spans_stripped} spans stripped, "
        f"{report.kept_late} kept because they were flagged since their first decision, "
        f"{report.files_removed} files removed"
    )
    for table in ("calls", "spans"):
        context.log_event(
            dg.AssetObservation(
                asset_key=table,
                metadata={
                    "swept_days": ", ".join(map(str, report.days)) or "none",
                    "rows_stripped": report.calls_stripped if table == "calls" else report.spans_stripped,
                    "kept_late": report.kept_late,
                    "bytes_before": report.bytes_before.get(table, 0),
                    "bytes_after": report.bytes_after.get(table, 0),
                    "table_version": warehouse.version(table),
                },
            )
        )


@dg.job(description="Remove the full text of ingredients-tier calls past the hot window, then vacuum.")
def retention_sweep() -> None:
    sweep_expired_text()


@dg.schedule(
    cron_schedule="0 5 * * *",
    job=retention_sweep,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
def retention_sweep_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    # after the nightly run (02:30 UTC) has decided yesterday
    today = context.scheduled_execution_time.date().isoformat()
    return dg.RunRequest(
        run_key=f"retention-sweep-{today}",
        run_config={"ops": {"sweep_expired_text": {"config": {"today": today}}}},
    )
