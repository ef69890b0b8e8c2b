"""Watch the source for new objects and ingest the days they belong to; with
sharded days, let the daily stages follow only once every shard of a day is in.

Each tick lists only the recent days' prefixes (today and yesterday by
default), never the whole bucket. The cursor keeps a digest of each day's
(key, etag) set; a day whose digest changed gets a run, keyed by that digest
so the same state never triggers twice. Objects older than the lookback are
picked up by the nightly schedule or a backfill.

With ``TRACELAKE_SHARDS`` set (pipelines/ingest/shards.py) a day is ingested as one run
per shard, each tagged with its shard and selecting only the raw-trace load
(``raw_traces``: calls, spans, ingest_log, quarantine, redaction_audit), so each
run holds one shard in memory. ``sharded_days`` then starts what a whole-day run
would have done after the load (``traces`` and the day's checks; at night every
stage of the nightly job) only when the latest run of every shard of that day
succeeded: a missing or failed shard holds the day back.
"""

import json
from datetime import UTC, datetime, time, timedelta

import dagster as dg

from pipelines.ingest.shards import (
    NIGHTLY_TAG,
    SHARD_TAG,
    SHARDING_TAG,
    ShardRun,
    ShardSpec,
    landed_key,
    missing_shards,
    shard_tags,
    stages_to_launch,
)
from pipelines.jobs import STAGES, nightly, stage_jobs
from pipelines.record.canonical import sha256_hex
from pipelines.resources.object_store import ObjectStore

LOOKBACK_DAYS = 2
# the nightly fan-out of shard runs: the time of the nightly schedule (schedules.py)
NIGHTLY_AT = time(2, 30)
# the multi-asset that loads raw objects: what one shard run materializes
LOAD_KEY = dg.AssetKey("calls")
RUN_STATES = {dg.DagsterRunStatus.SUCCESS: "succeeded"} | {
    status: "failed" for status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
}


def day_digest(objects) -> str:
    return sha256_hex("\n".join(f"{o.key}|{o.etag}" for o in objects))


def load_keys(repository: dg.RepositoryDefinition) -> list[dg.AssetKey]:
    """The keys the raw-trace load writes in one step (the multi-asset of ``calls``)."""
    return sorted(repository.asset_graph.get(LOAD_KEY).assets_def.keys)


def shard_request(repository, spec: ShardSpec, day: str, shard: int, run_key: str, nightly_day=None) -> dg.RunRequest:
    """One shard's run: the raw-trace load only, no checks (they read the whole day:
    they run after the last shard, with the daily stages)."""
    return dg.RunRequest(
        run_key=run_key,
        partition_key=day,
        job_name=stage_jobs["ingest"].name,
        asset_selection=load_keys(repository),
        asset_check_keys=[],
        tags=shard_tags(spec, shard, nightly_day),
    )


@dg.sensor(job=stage_jobs["ingest"], minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def new_source_objects(context: dg.SensorEvaluationContext, source: ObjectStore):
    cursor: dict[str, str] = json.loads(context.cursor or "{}")
    today = datetime.now(UTC).date()
    days = [(today - timedelta(days=i)).isoformat() for i in range(LOOKBACK_DAYS)]
    spec = source.shard_spec
    for day in days:
        by_shard = source.list_day_by_shard(datetime.fromisoformat(day).date())
        if not any(by_shard.values()):
            continue
        if not spec.sharded:
            digest = day_digest(by_shard[0])
            if cursor.get(day) != digest:
                yield dg.RunRequest(run_key=f"{day}:{digest[:16]}", partition_key=day)
                cursor[day] = digest
            continue
        # every shard of a day with objects gets a run the first time (an empty shard's run is
        # quick; the day waits for all of them), and then whenever its own objects change
        for shard, found in by_shard.items():
            name, digest = f"{day}#{spec}#{shard}", day_digest(found)
            if cursor.get(name) != digest:
                yield shard_request(context.repository_def, spec, day, shard, f"{name}:{digest[:16]}")
                cursor[name] = digest
    kept = {name: value for name, value in cursor.items() if name.split("#", 1)[0] in days}
    context.update_cursor(json.dumps(kept))


def latest_shard_runs(instance: dg.DagsterInstance, spec: ShardSpec, day: str) -> tuple[dict[int, ShardRun], set[int]]:
    """The latest run of each shard of ``day`` under ``spec``, and the shards that had a
    successful run of the nightly fan-out."""
    runs = instance.get_runs(
        filters=dg.RunsFilter(tags={"dagster/partition": day, SHARDING_TAG: str(spec)}), limit=50 * spec.count
    )
    latest: dict[int, ShardRun] = {}
    nightly_done: set[int] = set()
    for run in runs:  # newest first
        shard, state = int(run.tags[SHARD_TAG]), RUN_STATES.get(run.status, "running")
        nightly = run.tags.get(NIGHTLY_TAG) == day
        latest.setdefault(shard, ShardRun(shard, run.run_id, state, nightly))
        if nightly and state == "succeeded":
            nightly_done.add(shard)
    return latest, nightly_done


def after_load(repository: dg.RepositoryDefinition, job_name: str) -> dict:
    """What the ``nightly`` or ``ingest`` job does after the raw-trace load: its other assets and all its checks."""
    graph = repository.asset_graph
    selection = dg.AssetSelection.groups(*(STAGES if job_name == nightly.name else ("ingest",)))
    assets = selection.resolve(graph) - set(load_keys(repository))
    checks = selection.resolve_checks(graph)
    return {"job_name": job_name, "asset_selection": sorted(assets), "asset_check_keys": sorted(checks)}


@dg.sensor(
    jobs=[stage_jobs["ingest"], nightly],
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Sharded days: launches yesterday's shard runs at 02:30 UTC, and the daily stages of a day "
    "once every shard of it succeeded.",
)
def sharded_days(context: dg.SensorEvaluationContext, source: ObjectStore):
    spec = source.shard_spec
    if not spec.sharded:
        return dg.SkipReason("days are not sharded (TRACELAKE_SHARDS=1): the ingest and nightly jobs hold the day")
    repository = context.repository_def
    now = datetime.now(UTC)
    requests, waiting = [], []
    yesterday = (now - timedelta(days=1)).date().isoformat()
    if now.time() >= NIGHTLY_AT:  # the nightly schedule's fan-out; run keys make it once per day and shard
        requests += [
            shard_request(repository, spec, yesterday, s, f"nightly-{yesterday}#{spec}#{s}", nightly_day=yesterday)
            for s in range(spec.count)
        ]
    for day in [(now - timedelta(days=i)).date().isoformat() for i in range(LOOKBACK_DAYS + 1)]:
        latest, nightly_done = latest_shard_runs(context.instance, spec, day)
        if not latest:
            continue
        stages = stages_to_launch(spec, latest, nightly_done)
        if not stages:
            waiting.append(f"{day} (shards {', '.join(map(str, missing_shards(spec, latest)))})")
        if "nightly" in stages:
            # a nightly run without its load step: nightly_replay follows it as usual
            requests.append(
                dg.RunRequest(run_key=f"nightly-{day}", partition_key=day, **after_load(repository, nightly.name))
            )
        if "ingest" in stages:
            run_key = f"{day}#{spec}:{landed_key(latest)}"
            requests.append(dg.RunRequest(run_key=run_key, partition_key=day, **after_load(repository, "ingest")))
    if waiting:
        context.log.info("waiting for shards: " + "; ".join(waiting))
    return requests or dg.SkipReason("no day has all its shards in: " + ("; ".join(waiting) or "none ran yet"))


sensors = [new_source_objects, sharded_days]
