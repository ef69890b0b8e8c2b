"""The nightly run: at 02:30 UTC, every shard of yesterday (UTC) through the ``load`` job,
tagged ``tracelake/nightly``; once they have all landed, declarative automation starts the
``nightly`` job of the daily stages for that day (pipelines/jobs.py)."""

from datetime import timedelta

import dagster as dg

from pipelines.automation import NIGHTLY_TAG
from pipelines.jobs import load
from pipelines.partitions import day_shard_key, shard_keys


@dg.schedule(
    cron_schedule="30 2 * * *", job=load, execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING
)
def nightly_schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
    yesterday = (context.scheduled_execution_time - timedelta(days=1)).date().isoformat()
    return [
        dg.RunRequest(
            run_key=f"nightly-{yesterday}#{shard}",
            partition_key=day_shard_key(yesterday, shard),
            tags={NIGHTLY_TAG: yesterday},
        )
        for shard in shard_keys(context.repository_def)
    ]


schedules = [nightly_schedule]
