"""Blocking data-quality checks on the ingest tables, one per table and day.

Each check reads the day's rows through the warehouse, runs the table's Great
Expectations suite (pipelines/quality.py) and reports a rule-by-rule table.
A failure stops downstream assets of the same run.
"""

import warnings
from datetime import timedelta

import dagster as dg
import polars as pl

from assets.ingest import LOADED
from pipelines.automation import after_inputs, after_load
from pipelines.ingest import quality
from pipelines.partitions import daily, day_of
from pipelines.resources.policies import Redaction
from pipelines.resources.warehouse import Warehouse

# Partitioned asset checks are a preview API in Dagster 1.13; dagster is pinned
# exactly, so a patch release cannot change it under us.
warnings.filterwarnings(
    "ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning
)


def _day_rows(
    warehouse: Warehouse, table: str, day, columns: list[str] | None = None
) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    on_day = pl.col("occurred_date") == day
    if table == "spans":
        return warehouse.read("spans", on_day), {"calls": warehouse.read("calls", on_day, ["call_id"])}
    if table in ("calls", "traces"):
        return warehouse.read(table, on_day, columns), {}
    if table == "agent_events":  # the judge stage's agent log: its llm.call events need call rows
        return warehouse.read(table, on_day), {"calls": warehouse.read("calls", on_day, ["call_id"])}
    log = warehouse.read("ingest_log", pl.col("partition_date") == day)
    if table == "ingest_log":
        return log, {}
    return _quarantine_rows(warehouse, day, log["source_key"]), {}


def _quarantine_rows(
    warehouse: Warehouse, day, source_keys: pl.Series, columns: list[str] | None = None
) -> pl.DataFrame:
    # quarantine rows belong to the day of the object they came from
    recent = pl.col("ingested_date") >= day - timedelta(days=1)
    return warehouse.read("quarantine", recent & pl.col("source_key").is_in(source_keys.implode()), columns)


def quality_check(table: str, blocking: bool = True) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=table,
        name=f"{table}_quality",
        blocking=blocking,
        partitions_def=daily,
        automation_condition=after_load() if table in LOADED else after_inputs(),
        description=f"Great Expectations suite for one day of `{table}`: keys, hashes, times, counts.",
    )
    def check(context: dg.AssetCheckExecutionContext, warehouse: Warehouse) -> dg.AssetCheckResult:
        day = day_of(context)
        rows, others = _day_rows(warehouse, table, day, quality.READ_COLUMNS.get(table))
        report = quality.validate(table, rows, others)
        for failure in report.failures:
            context.log.warning(f"{table} {day}: {failure.rule} on {failure.column}: {failure.unexpected} rows")
        return dg.AssetCheckResult(
            passed=report.passed,
            metadata={
                "rows_checked": report.rows,
                "rules": len(report.results),
                "rules_failed": len(report.failures),
                "results": dg.MetadataValue.md(report.markdown()),
            },
        )

    return check


# The tables the residual-PII scan reads (``residual.SCANNED``): the tables ingest writes text to.
RESIDUAL_TABLES = ("calls", "spans", "redaction_audit", "quarantine")


def _scanned_rows(warehouse: Warehouse, table: str, day) -> pl.DataFrame:
    """The day's rows of ``table`` as the residual scan reads them (a quarantine row's message only)."""
    if table != "quarantine":
        return warehouse.read(table, pl.col("occurred_date") == day)
    log = warehouse.read("ingest_log", pl.col("partition_date") == day, ["source_key"])
    return _quarantine_rows(warehouse, day, log["source_key"], ["message"])


def residual_pii_check(table: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=table,
        name=f"{table}_residual_pii",
        blocking=True,
        partitions_def=daily,
        automation_condition=after_load(),
        description=f"No emails, valid CPFs/CNPJs, Luhn-valid cards or API keys left in `{table}`.",
    )
    def check(
        context: dg.AssetCheckExecutionContext, warehouse: Warehouse, redaction: Redaction
    ) -> dg.AssetCheckResult:
        from pipelines.redact.residual import patterns_for_mode, residual_pii_check

        day = day_of(context)
        report = residual_pii_check(
            _scanned_rows(warehouse, table, day), table, redaction.policy(), patterns_for_mode(redaction.mode)
        )
        if not report.passed:
            context.log.error(f"{table} {day}: residual PII found: {report.counts}; the rows were not redacted")
        return dg.AssetCheckResult(
            passed=report.passed,
            metadata={
                "rows_scanned": report.rows,
                "columns": ", ".join(report.columns),
                "results": dg.MetadataValue.md(report.markdown()),
            },
        )

    return check


checks = [quality_check(t) for t in ("calls", "spans", "traces", "ingest_log", "quarantine")] + [
    residual_pii_check(t) for t in RESIDUAL_TABLES
]
