"""Watch the source for new objects and ingest the days they belong to.

Each tick lists only the recent days' prefixes (today and yesterday by
default), never the whole bucket. The cursor keeps a digest of each day's
(key, etag) set; a day whose digest changed gets a run, keyed by that digest
so the same state never triggers twice. Objects older than the lookback are
picked up by the nightly schedule or a backfill.
"""

import json
from datetime import UTC, datetime, timedelta

import dagster as dg

from pipelines.jobs import stage_jobs
from pipelines.record.canonical import sha256_hex
from pipelines.resources.object_store import ObjectStore

LOOKBACK_DAYS = 2


def day_digest(objects) -> str:
    return sha256_hex("\n".join(f"{o.key}|{o.etag}" for o in objects))


@dg.sensor(job=stage_jobs["ingest"], minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def new_source_objects(context: dg.SensorEvaluationContext, source: ObjectStore):
    cursor: dict[str, str] = json.loads(context.cursor or "{}")
    today = datetime.now(UTC).date()
    days = [(today - timedelta(days=i)).isoformat() for i in range(LOOKBACK_DAYS)]
    for day in days:
        objects = source.list_day(datetime.fromisoformat(day).date())
        if not objects:
            continue
        digest = day_digest(objects)
        if cursor.get(day) != digest:
            yield dg.RunRequest(run_key=f"{day}:{digest[:16]}", partition_key=day)
            cursor[day] = digest
    context.update_cursor(json.dumps({d: cursor[d] for d in days if d in cursor}))


sensors = [new_source_objects]
