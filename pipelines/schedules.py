"""The nightly run: all stages for yesterday (UTC), at 02:30 UTC."""

from datetime import timedelta

import dagster as dg

from pipelines.jobs import nightly


@dg.schedule(
    cron_schedule="30 2 * * *", job=nightly, execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING
)
def nightly_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    yesterday = (context.scheduled_execution_time - timedelta(days=1)).date().isoformat()
    return dg.RunRequest(run_key=f"nightly-{yesterday}", partition_key=yesterday)


schedules = [nightly_schedule]
