"""Sharded days: a day split into shard runs (separate OS processes, running at the same
time) lands exactly the rows one whole-day run lands; the daily stages wait until every
shard of the day succeeded; a re-run of a shard is a no-op."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from pipelines.definitions import build
from pipelines.demo import generate
from pipelines.ingest.shards import (
    NIGHTLY_TAG,
    SHARD_TAG,
    ShardRun,
    ShardSpec,
    shard_from_tags,
    shard_tags,
    stages_to_launch,
)
from pipelines.record.schema import KEYS
from pipelines.resources.object_store import ObjectStore
from pipelines.schedules import nightly_schedule
from pipelines.sensors import after_load, load_keys, new_source_objects, shard_request, sharded_days
from tests.environments import local_settings
from tests.ingest.shard_run import execute, settings_file

ROOT = Path(__file__).resolve().parents[2]
# the sensors look at the recent days: the test day is yesterday
DAY = (datetime.now(UTC) - timedelta(days=1)).date()
SPEC = "hour:4"
LOADED = ("calls", "spans", "ingest_log", "quarantine", "redaction_audit")


def test_every_key_belongs_to_exactly_one_shard_by_its_hour_or_its_hash():
    hours = ShardSpec.parse("hour:4")
    assert [
        hours.shard_of(f"2026/11/29/support/{h:02d}-000.jsonl.gz", f"support/{h:02d}-000.jsonl.gz")
        for h in (0, 5, 6, 23)
    ] == [0, 0, 1, 3]
    assert hours.shard_of("year=2026/month=11/day=29/hour=13/a.json", "hour=13/a.json") == 2
    # no hour after the date: by hash, the same in every process
    no_hour = "2026/11/29/escalations/5f0c.json"
    assert hours.shard_of(no_hour, "escalations/5f0c.json") == ShardSpec("hash", 4).shard_of(no_hour)
    # a Langfuse export run's files join and wait for each other: one shard
    run = [
        f"lf/p1/{table}/2026-11-29T05:00:00Z.{ext}"
        for table, ext in (("observations_v2", "jsonl"), ("scores", "jsonl.gz"), ("manifests", "json"))
    ]
    for spec in (ShardSpec.parse("hash:7"), hours):
        assert len({spec.shard_of(k) for k in run}) == 1
    assert [list(hours.hours_of(s)) for s in range(4)] == [list(range(h, h + 6)) for h in (0, 6, 12, 18)]
    # a multiple of 24: that many shards of each hour, by the key's hash inside it
    halves = ShardSpec.parse("hour:48")
    split = [
        halves.shard_of(f"2026/11/29/support/13-{i:03d}.jsonl.gz", f"support/13-{i:03d}.jsonl.gz") for i in range(8)
    ]
    assert set(split) == {26, 27} and [list(halves.hours_of(s)) for s in (26, 27)] == [[13], [13]]
    assert str(ShardSpec.parse(None)) == "1" and not ShardSpec.parse("1").sharded
    for bad in ("hour:25", "hour:30", "hash:0", "by-day", "hash:x"):
        with pytest.raises(ValueError, match="TRACELAKE_SHARDS"):
            ShardSpec.parse(bad)
    with pytest.raises(ValueError, match="relaunch"):
        shard_from_tags(shard_tags(ShardSpec.parse("hash:8"), 3), hours)
    assert shard_from_tags({}, hours) is None


def _spawn(settings_json: str, shard: int, home: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.ingest.shard_run", settings_json, DAY.isoformat(), str(shard)],
        cwd=ROOT,
        env={**os.environ, "DAGSTER_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _finish(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err.decode()[-3000:]
    return json.loads(out.decode().strip().splitlines()[-1])


def _keys(warehouse, table: str):
    return warehouse.read(table, columns=list(KEYS[table])).sort(list(KEYS[table]))


def _tick(defs, instance, store) -> list[dg.RunRequest]:
    """The runs of the day's stages after the load that sharded_days asks for (not the
    nightly fan-out of shard runs it also asks for after 02:30 UTC)."""
    with dg.build_sensor_context(instance=instance, resources={"source": store}, definitions=defs) as context:
        result = sharded_days(context)
    if isinstance(result, dg.SkipReason):
        return []
    return [r for r in result if r.partition_key == DAY.isoformat() and SHARD_TAG not in r.tags]


def test_shard_runs_in_parallel_land_the_rows_of_one_run_and_the_day_waits_for_all(tmp_path, monkeypatch):
    summary = generate(str(tmp_path / "source"), calls=120, days=1, seed=5, end=DAY)
    whole = local_settings(tmp_path, warehouse_uri=str(tmp_path / "whole"))
    sharded = local_settings(tmp_path, warehouse_uri=str(tmp_path / "sharded"), shards=SPEC)
    store = sharded.object_store()
    by_shard = store.list_day_by_shard(DAY)
    assert len(by_shard) == 4 and all(by_shard.values()), {s: len(o) for s, o in by_shard.items()}
    assert sorted(o.key for found in by_shard.values() for o in found) == [o.key for o in store.list_day(DAY)]

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("{}\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get():  # its storage, created once before the shard processes share it
        pass
    defs, day = build(sharded), DAY.isoformat()
    # the default: the whole day in one run of the ingest job
    assert build(whole).resolve_job_def("ingest").execute_in_process(partition_key=day).success

    # three of the four shards, each its own process, at the same time
    settings_json = settings_file(sharded, tmp_path / "settings.json")
    reports = [_finish(p) for p in [_spawn(settings_json, s, home) for s in (0, 1, 2)]]
    assert all(r["success"] for r in reports)
    with dg.DagsterInstance.get() as instance:
        assert _tick(defs, instance, store) == [], "shard 3 has not run: the day waits"

        # the last shard lands: now, and only now, the day's stages after the load are requested
        repository = defs.get_repository_def()
        spec = store.shard_spec
        assert execute(defs, shard_request(repository, spec, day, 3, "last"), instance).success
        [request] = _tick(defs, instance, store)
        assert request.job_name == "ingest" and request.asset_selection == [dg.AssetKey("traces")]
        assert dg.AssetCheckKey(dg.AssetKey("calls"), "calls_quality") in request.asset_check_keys
        assert execute(defs, request, instance).success

        # exactly the rows of the whole-day run, each once
        one, split = whole.warehouse(), sharded.warehouse()
        for table in (*LOADED, "traces"):
            expected, landed = _keys(one, table), _keys(split, table)
            assert landed.height == expected.height, f"{table}: {landed.height} rows, one run wrote {expected.height}"
            assert landed.equals(expected), f"{table}: the keys differ from the whole-day run"
        assert set(split.read("calls", columns=["call_id"])["call_id"]) == set(
            one.read("calls", columns=["call_id"])["call_id"]
        )
        assert split.read("calls").height == summary.calls

        # a shard run again (as the nightly fan-out launches it): nothing new to read, no table
        # gets a new version; the day's nightly run waits for the fan-out's run of every shard
        versions = {t: split.version(t) for t in (*LOADED, "traces")}
        again = shard_request(repository, spec, day, 1, "again", nightly_day=day)
        assert again.tags[NIGHTLY_TAG] == day and again.asset_check_keys == []
        assert execute(defs, again, instance).success
        assert {t: split.version(t) for t in versions} == versions
        assert [r.job_name for r in _tick(defs, instance, store)] == ["ingest"]
        nightly = after_load(repository, "nightly")
        assert nightly["job_name"] == "nightly"
        assert {dg.AssetKey(k) for k in ("traces", "retention", "rot_checks")} <= set(nightly["asset_selection"])
        assert not set(load_keys(repository)) & set(nightly["asset_selection"])


def test_the_nightly_stages_follow_once_every_shard_had_its_nightly_run():
    spec = ShardSpec.parse("hash:3")

    def runs(*states_and_nightly):
        return {s: ShardRun(s, f"r{s}", state, nightly) for s, (state, nightly) in enumerate(states_and_nightly)}

    ok, night = ("succeeded", False), ("succeeded", True)
    assert stages_to_launch(spec, runs(ok, ok), set()) == [], "shard 2 never ran"
    assert stages_to_launch(spec, runs(ok, ("running", False), ok), set()) == []
    assert stages_to_launch(spec, runs(ok, ("failed", True), ok), {0}) == []
    assert stages_to_launch(spec, runs(ok, ok, ok), set()) == ["ingest"]
    assert stages_to_launch(spec, runs(night, night, night), {0, 1, 2}) == ["nightly"]
    # late objects re-ran a shard after the fan-out: nightly still runs once, and the new rows get traces
    assert stages_to_launch(spec, runs(night, ok, night), {0, 1, 2}) == ["nightly", "ingest"]
    assert stages_to_launch(spec, runs(night, night, ok), {0, 1}) == ["ingest"]


def test_sensor_requests_one_run_per_changed_shard_and_the_schedule_leaves_sharded_days_to_it(tmp_path, monkeypatch):
    for hour, name in ((1, "a"), (7, "b"), (8, "c")):
        path = tmp_path / f"{DAY:%Y/%m/%d}" / f"{hour:02d}-{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    store = ObjectStore(uri=str(tmp_path), shards=SPEC)
    defs = build(local_settings(tmp_path, shards=SPEC))

    def tick(cursor=None):
        context = dg.build_sensor_context(cursor=cursor, resources={"source": store}, definitions=defs)
        return [r for r in new_source_objects(context) if r.partition_key == DAY.isoformat()], context.cursor

    requests, cursor = tick()
    # the first time, every shard of the day (empty ones too: the day waits for all of them)
    assert sorted(int(r.tags[SHARD_TAG]) for r in requests) == [0, 1, 2, 3]
    assert all(r.asset_check_keys == [] and dg.AssetKey("traces") not in r.asset_selection for r in requests)
    assert tick(cursor)[0] == []
    (tmp_path / f"{DAY:%Y/%m/%d}" / "08-c.json").write_text('{"changed": 1}')
    requests, _ = tick(cursor)
    assert [r.tags[SHARD_TAG] for r in requests] == ["1"]

    monkeypatch.setenv("TRACELAKE_SHARDS", SPEC)
    context = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 11, 30, 2, 30, tzinfo=UTC))
    assert "sharded_days" in nightly_schedule.evaluate_tick(context).skip_message
    context = dg.build_sensor_context(resources={"source": ObjectStore(uri=str(tmp_path))}, definitions=defs)
    assert "not sharded" in sharded_days(context).skip_message
