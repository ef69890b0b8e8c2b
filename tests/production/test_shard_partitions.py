"""A sharded day on the production instance (Postgres, the daemon, the queue): the nightly
schedule's runs of the four ``hour:4`` shards of a day run at the same time through the
queue; one shard whose source object cannot be read fails (and is retried by the
instance's run_retries) and holds the daily stages back, its partition failed in the
GraphQL API; re-executing that one partition lets declarative automation (the daemon's
``daily_stages`` sensor) launch the day's daily stages, in one run, and the tables then hold
what one whole-day run writes."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
import uuid
from datetime import UTC, datetime

import boto3
import dagster as dg

from pipelines.automation import NIGHTLY_TAG
from pipelines.definitions import build
from pipelines.demo import generate
from pipelines.jobs import AUTOMATED_STAGE, STAGE_TAG
from pipelines.record.schema import KEYS
from pipelines.resources.warehouse import Warehouse
from pipelines.schedules import nightly_schedule
from tests.environments import local_settings, run_stage
from tests.fault_proxy import FaultProxy
from tests.processes import free_port
from tests.production.conftest import wait_until
from tests.production.test_postgres_instance import (
    BIN,
    IN_PROCESS,
    ROOT,
    RUN_TIMEOUT,
    _listening,
)
from tests.sensor_ticks import evaluations_since

DAY = datetime(2026, 11, 27).date()
SPEC = "hour:4"
TABLES = ("calls", "spans", "ingest_log", "quarantine", "redaction_audit", "traces")
BUCKET = f"tl-shards-{uuid.uuid4().hex[:8]}"
LAUNCH = """
mutation ($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on InvalidSubsetError { message } ... on RunConfigValidationInvalid { errors { message } } } }
"""
PARTITIONS_QUERY = """
{ assetNodeOrError(assetKey: {path: ["calls"]}) { ... on AssetNode {
    assetPartitionStatuses { ... on MultiPartitionStatuses { ranges {
      primaryDimStartKey primaryDimEndKey
      secondaryDim { ... on DefaultPartitionStatuses { materializedPartitions failedPartitions } } } } } } } }
"""


def _keys(warehouse: Warehouse, table: str):
    # ingest_log is keyed by (source_key, etag): an etag is the store's (S3's MD5 here, size and
    # mtime for the whole-day run's folder), so the two runs are compared on the objects' keys
    keys = ["source_key"] if table == "ingest_log" else list(KEYS[table])
    return warehouse.read(table, columns=keys).sort(keys)


def _graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", json.dumps({"query": query}).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        body = json.loads(response.read())
    assert "errors" not in body, body
    return body["data"]


def _runs(instance: dg.DagsterInstance, job: str) -> list[dg.DagsterRun]:
    """The job's runs of DAY (the daemon's own nightly schedule, if the test meets 02:30 UTC, runs yesterday)."""
    runs = instance.get_runs(dg.RunsFilter(job_name=job))
    return [r for r in runs if r.tags.get("dagster/partition", "").startswith(str(DAY))]


def _daily_runs(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    """The runs of DAY's daily stages the ``daily_stages`` automation sensor launched."""
    return list(instance.get_runs(dg.RunsFilter(tags={STAGE_TAG: AUTOMATED_STAGE, "dagster/partition": str(DAY)})))


def test_a_sharded_day_through_the_queue_holds_its_stages_until_every_shard_landed(
    deployment, tmp_path, moto_endpoint, monkeypatch
):
    local = tmp_path / "generated"
    summary = generate(str(local), calls=160, days=1, seed=11, end=DAY, stores_out=deployment.env["TRACELAKE_STORES"])
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        s3.upload_file(str(path), BUCKET, f"raw/{path.relative_to(local).as_posix()}")
    # what one whole-day run writes, from the same objects
    whole = local_settings(tmp_path, source_uri=str(local), warehouse_uri=str(tmp_path / "whole"),
                           stores_uri=deployment.env["TRACELAKE_STORES"])  # fmt: skip
    assert run_stage(whole, "ingest", DAY.isoformat()).success

    with FaultProxy(moto_endpoint) as proxy:
        aws = {"AWS_ENDPOINT_URL": proxy.url, "AWS_REGION": "us-east-1"}
        aws |= {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        deployment.env.update(aws, TRACELAKE_SHARDS=SPEC, TRACELAKE_SOURCE=f"s3://{BUCKET}/raw")
        for key, value in {**aws, "TRACELAKE_SHARDS": SPEC, "TRACELAKE_SOURCE": f"s3://{BUCKET}/raw"}.items():
            monkeypatch.setenv(key, value)
        settings = local_settings(tmp_path, source_uri=f"s3://{BUCKET}/raw", warehouse_uri=deployment.warehouse_uri,
                                  stores_uri=deployment.env["TRACELAKE_STORES"], shards=SPEC, endpoint_url=proxy.url,
                                  region="us-east-1", access_key_id="testing", secret_access_key="testing")  # fmt: skip
        by_shard = settings.object_store().list_day_by_shard(DAY)
        assert all(by_shard.values()), {s: len(o) for s, o in by_shard.items()}
        # an injected fault: every read of one object of shard 2 has its connection reset
        broken = by_shard[2][0].key
        proxy.add("reset", "GET", f"/{BUCKET}/raw/{re.escape(broken)}", times=10**6)
        # the proof that the four ran at the same time: each shard's reads wait until every shard is reading
        shard_reads = ["|".join(f"/{BUCKET}/raw/{re.escape(o.key)}$" for o in by_shard[s]) for s in sorted(by_shard)]
        proxy.rendezvous("GET", shard_reads)

        deployment.up()
        # four shard pods at once: the warehouse pool as deploy/README.md says to size it
        set_pool = [str(BIN / "dagster"), "instance", "concurrency", "set", "warehouse", "4"]
        subprocess.run(set_pool, cwd=ROOT, env=deployment.env, check=True, capture_output=True)
        webserver_port = free_port()
        deployment.start("webserver", [str(BIN / "dagster-webserver"), "-w", str(deployment.workspace),
                                       "-h", "127.0.0.1", "-p", str(webserver_port)])  # fmt: skip
        instance = dg.DagsterInstance.from_config(str(deployment.home))

        # what the nightly schedule asks for at 02:30 the next day, launched into the queue
        context = dg.build_schedule_context(
            scheduled_execution_time=datetime(2026, 11, 28, 2, 30, tzinfo=UTC),
            repository_def=build(settings).get_repository_def(),
        )
        requests = nightly_schedule.evaluate_tick(context).run_requests
        assert [r.partition_key for r in requests] == [f"{DAY}|hour4-{s}" for s in range(4)]
        wait_until(lambda: _listening(webserver_port), 180, f"the webserver\n{deployment.log('webserver')}")
        launched = [launch(webserver_port, "load", _shard_tags(request)) for request in requests]

        def settled() -> bool:
            runs = _runs(instance, "load")
            return len(runs) >= 6 and all(r.is_finished for r in runs)  # 4, and shard 2's two retries

        # six runs, three of them one after another (a run and its two retries): a longer guard
        wait_until(settled, 3 * RUN_TIMEOUT, f"the shard runs\n{deployment.log('daemon')}")
        # through the queue, and at the same time: a read of every shard was waiting at one moment
        # (a queue that ran them one by one leaves the first alone, reading an object every 50 s)
        assert all(_events(instance, run_id, dg.DagsterEventType.PIPELINE_ENQUEUED) for run_id in launched)
        assert proxy.met(), "the four shard runs were never reading at the same time"
        by_partition: dict[str, list[dg.DagsterRun]] = {}
        for run in _runs(instance, "load"):
            by_partition.setdefault(run.tags["dagster/partition"], []).append(run)
        statuses = {key: sorted(r.status.value for r in runs) for key, runs in by_partition.items()}
        assert statuses == {
            f"{DAY}|hour4-0": ["SUCCESS"],
            f"{DAY}|hour4-1": ["SUCCESS"],
            f"{DAY}|hour4-2": ["FAILURE"] * 3,  # run_retries (deploy/dagster.yaml): twice more
            f"{DAY}|hour4-3": ["SUCCESS"],
        }, statuses
        # the automation sensor has evaluated the day since (a whole evaluation begun after the last
        # shard run ended), and started nothing
        last = max(instance.get_run_record_by_id(r.run_id).end_time for r in _runs(instance, "load"))
        wait_until(
            lambda: evaluations_since(instance, "daily_stages", last) >= 1,
            180,
            f"a daily_stages tick\n{deployment.log('daemon')}",
        )
        assert not _daily_runs(instance), "a shard failed: no daily stage was launched"
        statuses = _graphql(webserver_port, PARTITIONS_QUERY)["assetNodeOrError"]["assetPartitionStatuses"]["ranges"]
        [day_range] = [r for r in statuses if r["primaryDimStartKey"] <= str(DAY) <= r["primaryDimEndKey"]]
        assert day_range["secondaryDim"]["failedPartitions"] == ["hour4-2"]
        assert sorted(day_range["secondaryDim"]["materializedPartitions"]) == ["hour4-0", "hour4-1", "hour4-3"]

        # the fault is over; re-execute the failed partition (its last run, as the UI's re-execute does)
        proxy.clear()
        failed = max(
            by_partition[f"{DAY}|hour4-2"], key=lambda r: instance.get_run_record_by_id(r.run_id).create_timestamp
        )
        partition = {k: v for k, v in failed.tags.items() if k.startswith("dagster/partition") or k == NIGHTLY_TAG}
        launch(webserver_port, "load", partition)
        wait_until(lambda: _daily_runs(instance), RUN_TIMEOUT, f"the daily stages\n{deployment.log('daemon')}")
        wait_until(lambda: all(r.is_finished for r in _daily_runs(instance)), 2 * RUN_TIMEOUT, "the daily stages' run")
        [daily] = _daily_runs(instance)
        assert daily.status == dg.DagsterRunStatus.SUCCESS
        stages = {key.to_user_string() for key in daily.asset_selection or ()}
        assert {"traces", "retention", "rot_checks", "semantic_errors"} <= stages, stages
        assert not _runs(instance, "nightly") and not _runs(instance, "ingest"), "one run did the day's stages"

        sharded, one = Warehouse(uri=deployment.warehouse_uri), whole.warehouse()
        for table in TABLES:
            expected, landed = _keys(one, table), _keys(sharded, table)
            assert landed.height == expected.height, f"{table}: {landed.height} rows, one run wrote {expected.height}"
            assert landed.equals(expected), f"{table}: the keys differ from the whole-day run"
        assert sharded.read("calls").height == summary.calls


def launch(port: int, job: str, tags: dict[str, str]) -> str:
    """Submit a run into the queue through the webserver's GraphQL API, as the UI's Launchpad
    and the daemon's schedule ticks do (a ``dagster job launch`` per run would load the code
    each time: on a loaded machine, slower than a run)."""
    params = {
        "selector": {"repositoryLocationName": "tracelake", "repositoryName": "__repository__", "jobName": job},
        "runConfigData": json.loads(IN_PROCESS),
        "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]},
    }
    body = json.dumps({"query": LAUNCH, "variables": {"params": params}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        launched = json.loads(response.read())["data"]["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return launched["run"]["runId"]


def _shard_tags(request: dg.RunRequest) -> dict[str, str]:
    day, shard = str(request.partition_key).split("|")
    tags = {**request.tags, "dagster/partition": str(request.partition_key)}
    return tags | {"dagster/partition/day": day, "dagster/partition/shard": shard}


def _events(instance: dg.DagsterInstance, run_id: str, kind: dg.DagsterEventType) -> list:
    return instance.get_records_for_run(run_id, of_type=kind).records
