"""Sharded days as Dagster partitions: a day split into day x shard runs of the ``load`` job
(three of them separate OS processes running at the same time) lands exactly the rows one
whole-day run lands; the daily assets start by declarative automation only once every shard of the day has
materialized and none is running or failed (traces and the checks after any load, every
stage after the nightly schedule's); a re-run of a shard commits nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from pipelines.automation import NIGHTLY_TAG
from pipelines.definitions import build
from pipelines.demo import generate
from pipelines.ingest.shards import ShardSpec
from pipelines.jobs import daily_selection
from pipelines.partitions import day_shard_key, shard_keys
from pipelines.record.schema import KEYS
from pipelines.resources.object_store import ObjectStore
from pipelines.schedules import nightly_schedule
from pipelines.sensors import new_source_objects
from tests.environments import local_settings, run_stage
from tests.ingest.shard_run import settings_file

ROOT = Path(__file__).resolve().parents[2]
# the sensors look at the recent days: the test day is yesterday
DAY = (datetime.now(UTC) - timedelta(days=1)).date()
SPEC = "hour:4"
SHARDS = ShardSpec.parse(SPEC).keys()
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
    # a shard's partition key names its setting: another setting's shard is refused
    assert hours.keys() == ["hour4-0", "hour4-1", "hour4-2", "hour4-3"] and ShardSpec.parse("1").keys() == ["all"]
    assert hours.shard_named("hour4-2") == 2
    with pytest.raises(ValueError, match="not a shard of hour:4"):
        hours.shard_named("hash8-3")


def _spawn(settings_json: str, shard: str, home: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.ingest.shard_run", settings_json, DAY.isoformat(), shard],
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


# what follows the nightly schedule's load of a day, besides traces and the checks
NIGHTLY_STAGES = [
    "agent_events",
    "judge_calibration",
    "retention",
    "retention_coverage",
    "rot_checks",
    "semantic_errors",
    "state_violations",
]
# the checks of the tables the load writes and of traces, run with traces
LOADED_CHECKS = [
    "calls_quality",
    "calls_residual_pii",
    "ingest_log_quality",
    "quarantine_quality",
    "quarantine_residual_pii",
    "redaction_audit_residual_pii",
    "spans_quality",
    "spans_residual_pii",
    "traces_quality",
]


class Automation:
    """The ``daily_stages`` sensor's evaluation, tick after tick: which daily assets and
    checks it would request for the test day."""

    def __init__(self, defs: dg.Definitions, instance: dg.DagsterInstance):
        self.defs, self.instance, self.cursor = defs, instance, None
        self.checks: list[str] = []

    def tick(self) -> list[str]:
        result = dg.evaluate_automation_conditions(
            defs=self.defs, instance=self.instance, cursor=self.cursor, asset_selection=daily_selection
        )
        self.cursor = result.cursor
        if os.environ.get("DEBUG_AUTOMATION"):
            for r in result.results:
                print(r.pprint())
        requested = [
            subset.key
            for subset in result._requested_subsets
            if DAY.isoformat() in subset.expensively_compute_partition_keys()
        ]
        self.checks = sorted(k.name for k in requested if isinstance(k, dg.AssetCheckKey))
        return sorted(k.to_user_string() for k in requested if isinstance(k, dg.AssetKey))


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
    defs, day = build(sharded), DAY.isoformat()
    assert shard_keys(defs.get_repository_def()) == SHARDS
    # the default: the whole day as one shard, then the ingest job
    assert shard_keys(build(whole).get_repository_def()) == ["all"]
    assert run_stage(whole, "ingest", day).success

    with dg.DagsterInstance.get() as instance:  # its storage, created once before the shard processes share it
        automation = Automation(defs, instance)
        assert automation.tick() == [], "no shard has landed"
        # three of the four shards, each its own process, at the same time
        settings_json = settings_file(sharded, tmp_path / "settings.json")
        reports = [_finish(p) for p in [_spawn(settings_json, s, home) for s in SHARDS[:3]]]
        assert all(r["success"] for r in reports)
        assert automation.tick() == [], "shard 3 has not landed: the day waits"

        def load(shard: str, tags: dict | None = None, definitions: dg.Definitions = defs) -> bool:
            """One shard's run of the load job in this process (the later runs: one at a time)."""
            job = definitions.resolve_job_def("load")
            partition_key = day_shard_key(day, shard)
            return job.execute_in_process(
                partition_key=partition_key, tags=tags, instance=instance, raise_on_error=False
            ).success

        # the last shard fails (its source unreachable): the day still waits
        broken = local_settings(tmp_path, warehouse_uri=str(tmp_path / "sharded"), shards=SPEC,
                                source_uri="s3://nowhere/raw", endpoint_url="http://127.0.0.1:9")  # fmt: skip
        assert not load(SHARDS[3], definitions=build(broken))
        assert automation.tick() == [], "shard 3 failed: the day waits"

        # shard 3 again, now it lands: traces and the checks start, once; the other stages wait
        # for the nightly schedule's load
        assert load(SHARDS[3])
        assert automation.tick() == ["traces"] and automation.checks == LOADED_CHECKS
        assert automation.tick() == [], "requested once"
        # what the sensor's run of that request does: the ingest job (a plain job, subset as the UI would)
        ingest = defs.resolve_job_def("ingest")
        assert dg.AssetKey("calls") not in ingest.asset_layer.selected_asset_keys
        subset = ingest.get_subset(asset_selection={dg.AssetKey("traces")})
        assert subset.execute_in_process(partition_key=day, instance=instance).success
        assert ingest.execute_in_process(partition_key=day, instance=instance).success
        assert automation.tick() == [], "the day is handled"

        # exactly the rows of the whole-day run, each once
        one, split = whole.warehouse(), sharded.warehouse()
        for table in (*LOADED, "traces"):
            expected, landed = _keys(one, table), _keys(split, table)
            assert landed.height == expected.height, f"{table}: {landed.height} rows, one run wrote {expected.height}"
            assert landed.equals(expected), f"{table}: the keys differ from the whole-day run"
        assert split.read("calls").height == summary.calls

        # the nightly schedule's runs of every shard: nothing new to read, no table gets a new
        # version; once they have all landed every daily stage starts, in one evaluation
        versions = {t: split.version(t) for t in (*LOADED, "traces")}
        nightly = {NIGHTLY_TAG: day}
        assert all(load(shard, nightly) for shard in SHARDS)
        assert {t: split.version(t) for t in versions} == versions
        assert automation.tick() == sorted(["traces", *NIGHTLY_STAGES])
        assert set(automation.checks) >= set(LOADED_CHECKS) | {"rot_rate_jump", "semantic_error_rate"}
        assert automation.tick() == [], "requested once"

        # a load of the day landing between two evaluations with the stages' own update, or with
        # their request, still starts them (with Dagster's since_last_handled the update or the
        # request won, and the day was never handled again)
        def nightly_load() -> None:  # one shard of the day, loaded again by the nightly schedule
            assert load(SHARDS[1], nightly)

        for job in ("ingest", "retention"):
            assert defs.resolve_job_def(job).execute_in_process(partition_key=day, instance=instance).success
        nightly_load()
        assert automation.tick() == sorted(["traces", *NIGHTLY_STAGES]), "after the stages' update"
        nightly_load()
        assert automation.tick() == sorted(["traces", *NIGHTLY_STAGES]), "after their request"
        assert automation.tick() == [], "requested once"


def test_sensor_requests_one_run_per_changed_shard_and_the_schedule_every_shard_of_yesterday(tmp_path):
    for hour, name in ((1, "a"), (7, "b"), (8, "c")):
        path = tmp_path / f"{DAY:%Y/%m/%d}" / f"{hour:02d}-{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    store = ObjectStore(uri=str(tmp_path), shards=SPEC)
    defs = build(local_settings(tmp_path, shards=SPEC))

    def tick(cursor=None, source=store):
        context = dg.build_sensor_context(cursor=cursor, resources={"source": source}, definitions=defs)
        return [r for r in new_source_objects(context) if r.partition_key.startswith(DAY.isoformat())], context.cursor

    requests, cursor = tick()
    # the first time, every shard of the day (empty ones too: the day waits for all of them)
    assert sorted(r.partition_key for r in requests) == [f"{DAY}|{s}" for s in SHARDS]
    assert {r.job_name for r in requests} <= {None, "load"}
    assert tick(cursor)[0] == []
    (tmp_path / f"{DAY:%Y/%m/%d}" / "08-c.json").write_text('{"changed": 1}')
    requests, _ = tick(cursor)
    assert [r.partition_key for r in requests] == [f"{DAY}|hour4-1"]
    with pytest.raises(ValueError, match="another setting"):
        tick(source=ObjectStore(uri=str(tmp_path)))

    context = dg.build_schedule_context(
        scheduled_execution_time=datetime(2026, 11, 30, 2, 30, tzinfo=UTC), repository_def=defs.get_repository_def()
    )
    requests = nightly_schedule.evaluate_tick(context).run_requests
    assert [r.partition_key for r in requests] == [f"2026-11-29|{s}" for s in SHARDS]
    assert {r.tags[NIGHTLY_TAG] for r in requests} == {"2026-11-29"} and nightly_schedule.job_name == "load"
