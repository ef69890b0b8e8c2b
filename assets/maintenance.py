"""Table maintenance as a scheduled job: compact, z-order the day just finished,
vacuum past the time-travel window, checkpoint. Each table it touches gets an
observation with its files and bytes before and after."""

from datetime import UTC, date, datetime, timedelta

import dagster as dg
from pydantic import Field

from pipelines.maintenance import maintain
from pipelines.pod_resources import HEAVY
from pipelines.record.schema import TABLES
from pipelines.resources.warehouse import Warehouse


class MaintenanceConfig(dg.Config):
    day: str | None = Field(default=None, description="Z-order this day's partitions, YYYY-MM-DD (default: yesterday)")
    time_travel_days: int = Field(
        default=7, ge=0, description="Keep every table version of the last this many days readable (time travel)"
    )
    zorder: bool = Field(default=True, description="Z-order the day's partitions on the columns people filter by")


@dg.op(pool="warehouse")
def maintain_tables(context: dg.OpExecutionContext, config: MaintenanceConfig, warehouse: Warehouse) -> None:
    """Compact, z-order, vacuum (keeping time travel) and checkpoint every table."""
    day = date.fromisoformat(config.day) if config.day else datetime.now(UTC).date() - timedelta(days=1)
    for name in TABLES:
        report = maintain(warehouse, name, [day], retention_days=config.time_travel_days, zorder=config.zorder)
        if report is None:
            continue
        context.log.info(
            f"{name}: {report.before.files} -> {report.after.files} files, "
            f"{report.before.bytes} -> {report.after.bytes} bytes, {report.files_vacuumed} vacuumed, "
            f"version {report.version_before} -> {report.version_after}"
        )
        context.log_event(
            dg.AssetObservation(
                asset_key=name,
                metadata={
                    "files_before": report.before.files,
                    "files_after": report.after.files,
                    "bytes_before": report.before.bytes,
                    "bytes_after": report.after.bytes,
                    "files_compacted": report.files_compacted,
                    "zordered_partitions": ", ".join(report.zordered_partitions) or "none",
                    "files_vacuumed": report.files_vacuumed,
                    "time_travel_days": config.time_travel_days,
                    "table_version": report.version_after,
                    "committed": dg.MetadataValue.bool(report.committed),
                    "table_uri": dg.MetadataValue.path(warehouse.table_uri(name)),
                },
            )
        )


@dg.job(
    description="Compact and z-order yesterday's partitions, vacuum past the time-travel window, checkpoint.",
    tags=HEAVY["maintenance"],
)
def maintenance() -> None:
    maintain_tables()


@dg.schedule(
    cron_schedule="30 6 * * *",
    job=maintenance,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
def maintenance_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    # after the nightly run (02:30) and the retention sweep (05:00) have written yesterday
    yesterday = (context.scheduled_execution_time - timedelta(days=1)).date().isoformat()
    return dg.RunRequest(
        run_key=f"maintenance-{yesterday}", run_config={"ops": {"maintain_tables": {"config": {"day": yesterday}}}}
    )
