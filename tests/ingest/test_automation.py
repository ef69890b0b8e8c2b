"""The sensor asks for load runs of the days whose objects changed, listing only recent days;
the schedule loads yesterday at 02:30 UTC, and the nightly job follows by automation."""

import json
from datetime import UTC, datetime, timedelta

import dagster as dg

from pipelines.definitions import defs
from pipelines.resources.object_store import ObjectStore
from pipelines.schedules import nightly_schedule
from pipelines.sensors import LOOKBACK_DAYS, new_source_objects


def _tick(store, cursor=None):
    context = dg.build_sensor_context(cursor=cursor, resources={"source": store}, definitions=defs)
    requests = list(new_source_objects(context))
    return requests, context.cursor


def _put(root, day, name):
    path = root / f"{day:%Y/%m/%d}" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")


def test_sensor_requests_runs_for_new_objects_only(tmp_path):
    today = datetime.now(UTC).date()
    store = ObjectStore(uri=str(tmp_path))
    requests, cursor = _tick(store)
    assert requests == []

    _put(tmp_path, today, "a.json")
    _put(tmp_path, today - timedelta(days=1), "b.json")
    _put(tmp_path, today - timedelta(days=LOOKBACK_DAYS + 3), "old.json")  # outside the lookback: not listed
    requests, cursor = _tick(store, cursor)
    # unsharded: one shard, "all", per day
    assert sorted(r.partition_key for r in requests) == sorted([f"{today}|all", f"{today - timedelta(days=1)}|all"])
    assert set(json.loads(cursor)) == {f"{today}#all", f"{today - timedelta(days=1)}#all"}

    requests, cursor = _tick(store, cursor)
    assert requests == [], "the same objects never trigger twice"

    _put(tmp_path, today, "c.json")
    requests, _ = _tick(store, cursor)
    assert [r.partition_key for r in requests] == [f"{today}|all"]
    assert requests[0].run_key.startswith(today.isoformat())


def test_nightly_schedule_targets_yesterday_at_0230_utc():
    assert nightly_schedule.cron_schedule == "30 2 * * *"
    assert nightly_schedule.execution_timezone == "UTC"
    context = dg.build_schedule_context(
        scheduled_execution_time=datetime(2026, 11, 30, 2, 30, tzinfo=UTC), repository_def=defs.get_repository_def()
    )
    [request] = nightly_schedule.evaluate_tick(context).run_requests
    assert request.partition_key == "2026-11-29|all" and request.tags["tracelake/nightly"] == "2026-11-29"
    assert nightly_schedule.job_name == "load"


def test_definitions_load_with_every_stage_job():
    repo = defs.get_repository_def()
    assert {"load", "ingest", "nightly"} <= {j.name for j in repo.get_all_jobs()}
    keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    assert {"calls", "spans", "traces", "ingest_log", "quarantine"} <= keys
