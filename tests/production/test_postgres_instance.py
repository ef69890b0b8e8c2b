"""The production instance (deploy/dagster.yaml) on a real PostgreSQL: a code server, the
daemon and runs submitted through the queued run coordinator, as in docker-compose.yml.

Two demo days go through the night at the same time, as the nightly schedule starts them: the
load of each day (one shard: ``TRACELAKE_SHARDS=1``), then the daily stages, which the daemon's
``daily_stages`` automation sensor launches once the load landed. A second night of one day
changes no table; run, event-log, schedule and concurrency storage land in Postgres. A run whose
code server is killed -9 with its run worker is failed by run monitoring (its heartbeat stops)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from datetime import date
from pathlib import Path

import dagster as dg
import polars as pl
import yaml

from pipelines.automation import NIGHTLY_TAG
from pipelines.demo import generate
from pipelines.ingest.shards import WHOLE_DAY
from pipelines.jobs import AUTOMATED_STAGE, STAGE_TAG
from pipelines.partitions import day_shard_key
from pipelines.resources.warehouse import Warehouse
from tests.processes import free_port
from tests.production.conftest import Postgres, wait_until

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DAYS = [date(2026, 11, 27), date(2026, 11, 28)]
# rot_checks is left out: each run is a new check of every call (keyed by call and check time)
TABLES = ("calls", "spans", "traces", "ingest_log", "quarantine", "redaction_audit", "retention")
# one process per run: the default multiprocess executor would start one per step
IN_PROCESS = json.dumps({"execution": {"config": {"in_process": {}}}})
# generous: a guard against a hang, not a timing assertion (seen: 60 s alone, 230 s on a loaded machine)
RUN_TIMEOUT = 600


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Deployment:
    """The compose file's code server and daemon as processes, with their env and logs."""

    def __init__(self, tmp_path: Path, postgres: Postgres):
        self.postgres = postgres
        self.home = tmp_path / "dagster_home"
        self.home.mkdir()
        shutil.copy(ROOT / "deploy" / "dagster.yaml", self.home / "dagster.yaml")
        self.warehouse_uri = str(tmp_path / "warehouse")
        self.env = {
            **os.environ,
            **postgres.env(),
            "DAGSTER_HOME": str(self.home),
            "TRACELAKE_SOURCE": str(tmp_path / "source"),
            "TRACELAKE_WAREHOUSE": self.warehouse_uri,
            "TRACELAKE_STORES": str(tmp_path / "stores"),
            # the runs the daemon's automation launches, one process each, like the launched ones
            # (IN_PROCESS): the default would start a process per step, twenty for the daily stages
            "TRACELAKE_RUN_STEPS": "in_process",
        }
        self.port = free_port()
        self.workspace = tmp_path / "workspace.yaml"
        server = {"host": "127.0.0.1", "port": self.port, "location_name": "tracelake"}
        self.workspace.write_text(yaml.safe_dump({"load_from": [{"grpc_server": server}]}))
        self.logs = tmp_path / "logs"
        self.logs.mkdir()
        self.processes: list[subprocess.Popen] = []

    def start(self, name: str, argv: list[str]) -> None:
        out = (self.logs / f"{name}.log").open("w")
        # own process group: the daemon and the code server start children of their own
        self.processes.append(
            subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        )

    def up(self) -> None:
        # as the Helm chart's post-install job does: pools get their limits before any run. Left to the
        # runs, two of them starting at once race to create the same pool row on Postgres and one fails.
        for pool, limit in (("warehouse", "2"), ("llm", "4")):
            subprocess.run(
                [str(BIN / "dagster"), "instance", "concurrency", "set", pool, limit],
                cwd=ROOT,
                env=self.env,
                check=True,
                capture_output=True,
            )
        self.start(
            "code",
            [str(BIN / "dagster"), "api", "grpc", "--host", "127.0.0.1", "--port", str(self.port)]
            + ["-m", "pipelines.definitions"],
        )
        try:
            wait_until(lambda: _listening(self.port), 180, f"the code server on port {self.port}")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.log('code')}") from None
        self.start("daemon", [str(BIN / "dagster-daemon"), "run", "-w", str(self.workspace)])

    def launch(self, day: date) -> str:
        """Submit the load of ``day`` (its one shard) as the nightly schedule does: into the queue."""
        run_id = str(uuid.uuid4())
        tags = {"dagster/partition": day_shard_key(day, WHOLE_DAY), NIGHTLY_TAG: day.isoformat()}
        launched = subprocess.run(
            [str(BIN / "dagster"), "job", "launch", "-w", str(self.workspace), "-j", "load"]
            + ["--tags", json.dumps(tags), "--config-json", IN_PROCESS]
            + ["--run-id", run_id],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
        )
        assert launched.returncode == 0, f"dagster job launch failed for {day}:\n{launched.stderr[-3000:]}"
        return run_id

    def shorten_monitoring(self, heartbeat: int, stale_after: int) -> None:
        """The instance file with run monitoring's intervals in seconds, not minutes (before ``up``)."""
        config = yaml.safe_load((self.home / "dagster.yaml").read_text())
        config["run_launcher"]["config"] = {"heartbeat_seconds": heartbeat, "stale_after_seconds": stale_after}
        config["run_monitoring"]["poll_interval_seconds"] = 1
        (self.home / "dagster.yaml").write_text(yaml.safe_dump(config))

    def kill_code_server(self) -> None:
        """kill -9 of the code server and the run workers it started (its process group)."""
        code = self.processes[0]
        os.killpg(code.pid, signal.SIGKILL)
        code.wait(timeout=30)

    def log(self, name: str) -> str:
        return "\n".join((self.logs / f"{name}.log").read_text().splitlines()[-40:])

    def down(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def _error(entry) -> bool:
    return getattr(entry.dagster_event.event_specific_data, "error", None) is not None


def _finished(instance: dg.DagsterInstance, run_ids: list[str]) -> bool:
    runs = [instance.get_run_by_id(r) for r in run_ids]
    return all(r is not None and r.is_finished for r in runs)


def _daily_runs(instance: dg.DagsterInstance, day: date) -> list[dg.DagsterRun]:
    """The runs of the day's daily stages the ``daily_stages`` automation sensor launched."""
    tags = {STAGE_TAG: AUTOMATED_STAGE, "dagster/partition": day.isoformat()}
    return list(instance.get_runs(dg.RunsFilter(tags=tags)))


def _steps_of(instance: dg.DagsterInstance, runs: list[dg.DagsterRun]) -> str:
    """Each run and the steps it started, for an assertion's message."""
    lines = []
    for run in runs:
        events = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START)
        lines.append(f"{run.run_id} {run.status}: {sorted(e.step_key for e in events)}")
    return "\n".join(lines)


def _state(warehouse: Warehouse) -> dict[str, tuple[int | None, int]]:
    return {t: (warehouse.version(t), warehouse.read(t).height) for t in TABLES}


def test_nightly_runs_through_the_queue_on_postgres(deployment, tmp_path):
    made = {}
    for day in DAYS:
        summary = generate(
            deployment.env["TRACELAKE_SOURCE"],
            calls=60,
            days=1,
            seed=11,
            end=day,
            stores_out=deployment.env["TRACELAKE_STORES"],
        )
        made[day] = summary.calls
    deployment.up()
    instance = dg.DagsterInstance.from_config(str(deployment.home))
    warehouse = Warehouse(uri=deployment.warehouse_uri)

    def run_all(days: list[date]) -> list[str]:
        before = {day: len(_daily_runs(instance, day)) for day in days}
        run_ids = [deployment.launch(day) for day in days]
        wait_until(lambda: _finished(instance, run_ids), RUN_TIMEOUT, f"runs {run_ids}\n{deployment.log('daemon')}")

        def daily_done() -> bool:  # a new run of the daily stages per day, every one finished
            runs = {day: _daily_runs(instance, day) for day in days}
            return all(len(runs[d]) > before[d] and all(r.is_finished for r in runs[d]) for d in days)

        wait_until(daily_done, 2 * RUN_TIMEOUT, f"the daily stages of {days}\n{deployment.log('daemon')}")
        for day in days:  # the night of a day reads as one run: its checks start with traces, not before
            runs = _daily_runs(instance, day)
            assert len(runs) == before[day] + 1, _steps_of(instance, runs)
        run_ids += [_daily_runs(instance, day)[0].run_id for day in days]  # newest first
        for run_id in run_ids:
            status = instance.get_run_by_id(run_id).status
            # what the run's events say went wrong (step failures, run-level errors)
            failures = [
                e.message + (f"\n{e.dagster_event.event_specific_data.error.to_string()}" if _error(e) else "")
                for e in instance.all_logs(run_id)
                if e.dagster_event and (e.dagster_event.is_failure or _error(e))
            ]
            assert status == dg.DagsterRunStatus.SUCCESS, f"{run_id} {status}\n{failures}"
        return run_ids

    # two days at once: each lands in full, and only once
    both = run_all(DAYS)
    calls = warehouse.read("calls").group_by("occurred_date").len()
    assert dict(calls.iter_rows()) == made
    assert warehouse.read("calls")["call_id"].n_unique() == sum(made.values())
    state = _state(warehouse)
    assert state["retention"][1] == sum(made.values())

    # the first day again
    again = run_all(DAYS[:1])
    assert _state(warehouse) == state, "re-running the day changes no row count and makes no Delta version"
    checks = warehouse.read("rot_checks").group_by("occurred_date").agg(pl.len(), pl.col("checked_at").n_unique())
    per_day = {day: (n, times) for day, n, times in checks.iter_rows()}
    assert per_day == {DAYS[0]: (2 * made[DAYS[0]], 2), DAYS[1]: (made[DAYS[1]], 1)}, "one new check per call"

    # no run of the daily stages came after the ones waited for
    later = {day: len(_daily_runs(instance, day)) for day in DAYS}
    assert later == {DAYS[0]: 2, DAYS[1]: 1}, _steps_of(instance, [r for d in DAYS for r in _daily_runs(instance, d)])

    # what the instance stored, read from Postgres itself
    run_ids = both + again
    runs = dict(deployment.postgres.query("SELECT run_id, status FROM runs"))
    assert {runs[r] for r in run_ids} == {"SUCCESS"}
    events = pl.DataFrame(
        deployment.postgres.query("SELECT run_id, dagster_event_type FROM event_logs WHERE run_id = ANY(%s)", run_ids),
        schema=["run_id", "event"],
        orient="row",
    )
    per_run = events.group_by("run_id").agg(pl.col("event"))
    for run_id, kinds in per_run.iter_rows():
        assert {"PIPELINE_ENQUEUED", "PIPELINE_STARTING", "PIPELINE_SUCCESS"} <= set(kinds), (
            f"{run_id} did not go through the queue"
        )
        assert "ASSET_MATERIALIZATION" in kinds
    assert per_run.height == len(run_ids)
    # the daemon's scheduler keeps the state of each running schedule in schedule storage
    bodies = [body for (body,) in deployment.postgres.query("SELECT instigator_body FROM instigators")]
    schedules = {name for body in bodies for name in re.findall(r'"job_name": ?"([^"]+)"', body)}
    assert {"nightly_schedule", "maintenance_schedule", "retention_sweep_schedule"} <= schedules, bodies[:1]
    assert "warehouse" in {
        k for (k,) in deployment.postgres.query("SELECT DISTINCT concurrency_key FROM concurrency_slots")
    }
    daemons = {t for (t,) in deployment.postgres.query("SELECT daemon_type FROM daemon_heartbeats")}
    assert {"QUEUED_RUN_COORDINATOR", "SCHEDULER", "MONITORING"} <= daemons


def test_a_run_killed_with_its_code_server_is_failed_by_run_monitoring(deployment, tmp_path):
    """An OOM-killed or restarted code container takes the run workers it started with it;
    nothing is left to report the run. Its heartbeat stops, and the daemon fails it."""
    generate(deployment.env["TRACELAKE_SOURCE"], calls=60, days=1, seed=11, end=DAYS[0],
             stores_out=deployment.env["TRACELAKE_STORES"])  # fmt: skip
    deployment.shorten_monitoring(heartbeat=1, stale_after=4)
    deployment.up()
    instance = dg.DagsterInstance.from_config(str(deployment.home))
    run_id = deployment.launch(DAYS[0])
    wait_until(
        lambda: instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED,
        RUN_TIMEOUT,
        f"run {run_id} to start\n{deployment.log('daemon')}",
    )
    beat = f"tracelake/heartbeat/{run_id}"
    wait_until(lambda: instance.run_storage.get_cursor_values({beat}), 60, "the run worker's first heartbeat")
    deployment.kill_code_server()
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED  # what the kill leaves
    wait_until(
        lambda: instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE,
        120,
        f"run monitoring to fail {run_id}\n{deployment.log('daemon')}",
    )
    messages = [e.message for e in instance.all_logs(run_id) if e.dagster_event and e.dagster_event.is_failure]
    assert any("no heartbeat from the run worker" in m for m in messages), messages
