"""Watch the source for new objects and ingest the shards they belong to; start the
daily stages of a day once every shard of it is in (declarative automation).

Each tick lists only the recent days' prefixes (today and yesterday by default),
never the whole bucket. The cursor keeps a digest of each shard's (key, etag) set; a
shard whose digest changed gets a run of the ``load`` job for its day x shard
partition, keyed by that digest so the same state never triggers twice. Every shard of
a day with objects gets a run the first time (an empty shard's run is quick; the day
waits for all of them). Objects older than the lookback are picked up by the nightly
schedule or a backfill.

``daily_stages`` evaluates the automation conditions of the daily assets
(pipelines/automation.py): traces and the checks follow a day once every shard of it
has materialized and none is running or failed; the other daily stages follow the
shard runs of the nightly schedule, in the same run.
"""

import json
from datetime import UTC, datetime, timedelta

import dagster as dg

from pipelines.jobs import AUTOMATED_STAGE, STAGE_TAG, daily_selection, load
from pipelines.partitions import day_shard_key, shard_keys
from pipelines.pod_resources import HEAVY
from pipelines.record.canonical import sha256_hex
from pipelines.resources.object_store import ObjectStore

LOOKBACK_DAYS = 2


def day_digest(objects) -> str:
    return sha256_hex("\n".join(f"{o.key}|{o.etag}" for o in objects))


@dg.sensor(job=load, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def new_source_objects(context: dg.SensorEvaluationContext, source: ObjectStore):
    cursor: dict[str, str] = json.loads(context.cursor or "{}")
    today = datetime.now(UTC).date()
    days = [(today - timedelta(days=i)).isoformat() for i in range(LOOKBACK_DAYS)]
    names = source.shard_spec.keys()
    if names != shard_keys(context.repository_def):
        raise ValueError(
            f"the source is sharded {source.shard_spec} but the load's partitions are of another setting "
            "(TRACELAKE_SHARDS when the definitions were built): build them with one setting"
        )
    for day in days:
        by_shard = source.list_day_by_shard(datetime.fromisoformat(day).date())
        if not any(by_shard.values()):
            continue
        for shard, found in by_shard.items():
            name, digest = f"{day}#{names[shard]}", day_digest(found)
            if cursor.get(name) != digest:
                yield dg.RunRequest(run_key=f"{name}:{digest[:16]}", partition_key=day_shard_key(day, names[shard]))
                cursor[name] = digest
    kept = {name: value for name, value in cursor.items() if name.split("#", 1)[0] in days}
    context.update_cursor(json.dumps(kept))


# one run per day holds what is requested for it in one evaluation: at night every daily stage
daily_stages = dg.AutomationConditionSensorDefinition(
    "daily_stages",
    target=daily_selection,
    run_tags={**HEAVY["nightly"], STAGE_TAG: AUTOMATED_STAGE},
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    emit_backfills=False,
    description="A day's traces and checks once every shard of it has landed; its retention, rot and judge "
    "stages too once the nightly schedule's shard runs have; never while a shard of the day is missing, "
    "running or failed.",
)

sensors = [new_source_objects, daily_stages]
