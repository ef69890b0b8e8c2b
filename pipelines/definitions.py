"""The one Definitions entry point: assets, checks, jobs, schedules, sensors, resources."""

from __future__ import annotations

import dagster as dg

from assets import ingest, judge, maintenance, quality, replay, retention, rot
from pipelines.ingest.shards import ShardSpec
from pipelines.jobs import jobs
from pipelines.run_heartbeat import executor_for
from pipelines.schedules import schedules
from pipelines.sensors import sensors
from pipelines.settings import Settings


def build(settings: Settings | None = None) -> dg.Definitions:
    settings = settings or Settings.from_env()
    return dg.Definitions(
        assets=[
            ingest.raw_traces_for(ShardSpec.parse(settings.shards)),
            ingest.traces,
            retention.retention,
            retention.retention_coverage,
            rot.rot_checks,
            replay.replays,
            replay.replay_summary,
            *judge.assets,
        ],
        asset_checks=[*quality.checks, rot.rot_rate_jump, *judge.checks],
        jobs=jobs,
        schedules=[*schedules, retention.retention_sweep_schedule, maintenance.maintenance_schedule],
        sensors=[
            *sensors,
            replay.candidate_partitions_sync,
            replay.nightly_replay,
            replay.replay_automation,
            judge.judge_alerts,
        ],
        resources=settings.resources(),
        # Dagster's default executor, whose run worker beats for run monitoring (pipelines/run_heartbeat.py)
        executor=executor_for(settings.run_steps),
    )


defs = build()
