"""The nightly run: all stages for yesterday (UTC), at 02:30 UTC.

With sharded days (TRACELAKE_SHARDS) one run cannot hold the day: the
``sharded_days`` sensor launches yesterday's shard runs at the same time, and
the nightly run of the daily stages once they all succeeded."""

from datetime import timedelta

import dagster as dg

from pipelines.jobs import nightly
from pipelines.settings import shard_spec


@dg.schedule(
    cron_schedule="30 2 * * *", job=nightly, execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING
)
def nightly_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    yesterday = (context.scheduled_execution_time - timedelta(days=1)).date().isoformat()
    if (spec := shard_spec()).sharded:
        return dg.SkipReason(f"{yesterday} is sharded ({spec}): the sharded_days sensor runs it by shard")
    return dg.RunRequest(run_key=f"nightly-{yesterday}", partition_key=yesterday)


schedules = [nightly_schedule]
