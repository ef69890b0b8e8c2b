"""A run whose worker is killed -9 is marked failed by the daemon's run monitoring within
minutes, not left STARTED for 26 hours (or forever): both instance files use the heartbeat
launcher (pipelines/run_heartbeat.py), and under a real dagster-daemon

- a run started in-process the way `tracelake run` starts it, its process killed -9, and
- a run launched through a code server, the code server killed -9 with its run worker
  (an OOM-killed or restarted code container),

are failed with the reason, while a healthy run that outlives the staleness limit is not.
The test instance is the project's dagster.yaml with its intervals shortened (a beat a
second, stale after four, the monitoring loop every second)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from pipelines.run_heartbeat import HeartbeatRunLauncher
from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STALE_AFTER = 4
# generous: guards against a hang on a loaded machine, not timing assertions
WAIT = 120

SLOW_JOB = textwrap.dedent(
    """
    import time
    import dagster as dg
    from pipelines.run_heartbeat import executor

    @dg.op
    def wait_forever():
        time.sleep(600)

    @dg.job
    def slow():
        wait_forever()

    defs = dg.Definitions(jobs=[slow], executor=executor)
    """
)
# `tracelake run`'s way of running a job: in this process, with its instance and a heartbeat
IN_PROCESS = textwrap.dedent(
    """
    from pipelines.instance import open_instance
    from pipelines.run_heartbeat import execute_in_process
    from slow_job import defs

    execute_in_process(defs.resolve_job_def("slow"), open_instance())
    """
)


@pytest.mark.parametrize("config", ["dagster.yaml", "deploy/dagster.yaml"])
def test_both_instance_files_detect_a_dead_worker_in_minutes(config, tmp_path):
    settings = yaml.safe_load((ROOT / config).read_text())
    # the production file's Postgres storage is swapped for SQLite: the monitoring blocks are what is checked
    home = tmp_path / "home"
    home.mkdir()
    local = {"storage": {"sqlite": {"base_dir": str(tmp_path / "storage")}}}
    local |= {k: settings[k] for k in ("run_launcher", "run_monitoring", "run_retries")}
    (home / "dagster.yaml").write_text(yaml.safe_dump(local))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        launcher = instance.run_launcher
        assert isinstance(launcher, HeartbeatRunLauncher) and launcher.supports_check_run_worker_health
        assert instance.run_monitoring_enabled and "MONITORING" in instance.get_required_daemon_types()
        # a dead worker is found within ten minutes of its last beat
        assert launcher.stale_after_seconds + instance.run_monitoring_settings["poll_interval_seconds"] <= 600
        assert launcher.stale_after_seconds >= 3 * launcher.heartbeat_seconds
        # a live one that hangs is stopped well within a day, and the retried runs together
        # cover a Message Batch's 24 hours (the retry adopts the persisted batch)
        max_runtime = instance.run_monitoring_max_runtime_seconds
        assert 0 < max_runtime <= 12 * 3600
        assert max_runtime * (1 + settings["run_retries"]["max_retries"]) >= 24 * 3600
        assert instance.run_monitoring_start_timeout_seconds > 0


def _wait(predicate, what: str, logs: Path | None = None):
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    tail = "" if logs is None else "\n".join(p.read_text()[-2000:] for p in sorted(logs.glob("*.log")))
    raise AssertionError(f"timed out after {WAIT} s waiting for {what}\n{tail}")


class Deployment:
    """A local instance (the project's dagster.yaml, storage under tmp, short intervals),
    a code server for the slow job and a real dagster-daemon, each in its own process group."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.home = tmp_path / "home"
        self.home.mkdir()
        config = yaml.safe_load((ROOT / "dagster.yaml").read_text())
        config["storage"]["sqlite"]["base_dir"] = str(self.home / "storage")
        config["local_artifact_storage"]["config"]["base_dir"] = str(self.home)
        config["compute_logs"]["config"]["base_dir"] = str(self.home / "logs")
        config["run_launcher"]["config"] = {"heartbeat_seconds": 1, "stale_after_seconds": STALE_AFTER}
        config["run_monitoring"]["poll_interval_seconds"] = 1
        (self.home / "dagster.yaml").write_text(yaml.safe_dump(config))
        (tmp_path / "slow_job.py").write_text(SLOW_JOB)
        self.port = free_port()
        self.workspace = tmp_path / "workspace.yaml"
        server = {"host": "127.0.0.1", "port": self.port, "location_name": "slow"}
        self.workspace.write_text(yaml.safe_dump({"load_from": [{"grpc_server": server}]}))
        self.env = {**os.environ, "DAGSTER_HOME": str(self.home), "PYTHONPATH": f"{tmp_path}:{ROOT}"}
        self.logs = tmp_path / "logs"
        self.logs.mkdir()
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        out = (self.logs / f"{name}.log").open("w")
        process = subprocess.Popen(
            argv, cwd=self.tmp, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.processes[name] = process
        return process

    def up(self) -> None:
        self.start("code", [str(BIN / "dagster"), "api", "grpc", "--host", "127.0.0.1", "--port", str(self.port)]
                   + ["-f", str(self.tmp / "slow_job.py")])  # fmt: skip

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        _wait(listening, "the code server", self.logs)
        self.start("daemon", [str(BIN / "dagster-daemon"), "run", "-w", str(self.workspace)])
        with self.instance() as instance:
            _wait(lambda: "MONITORING" in instance.get_daemon_statuses(), "the daemon's monitoring loop", self.logs)

    def instance(self) -> dg.DagsterInstance:
        return dg.DagsterInstance.from_config(str(self.home))

    def kill(self, name: str) -> None:
        """kill -9 of the process and everything it started (its process group)."""
        process = self.processes[name]
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def down(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


@pytest.fixture
def deployment(tmp_path):
    deployment = Deployment(tmp_path)
    try:
        deployment.up()
        yield deployment
    finally:
        deployment.down()


def _only_run(instance: dg.DagsterInstance, status: dg.DagsterRunStatus) -> dg.DagsterRun | None:
    runs = instance.get_runs()
    return runs[0] if len(runs) == 1 and runs[0].status == status else None


def _killed_and_failed(deployment: Deployment, worker: str) -> str:
    """Let the run live past the staleness limit (it must stay STARTED), kill -9 ``worker``,
    and wait for run monitoring to fail it; the failure's message."""
    with deployment.instance() as instance:
        run = _wait(lambda: _only_run(instance, dg.DagsterRunStatus.STARTED), "the run to start", deployment.logs)
        time.sleep(2 * STALE_AFTER)  # a healthy run beats: monitoring leaves it alone
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
        deployment.kill(worker)
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED  # what the kill leaves
        killed_at = time.monotonic()
        _wait(
            lambda: instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE,
            "run monitoring to fail the killed run",
            deployment.logs,
        )
        # found within the staleness limit plus a few monitoring polls (well inside WAIT)
        assert time.monotonic() - killed_at < 60
        failure = next(
            e
            for e in instance.all_logs(run.run_id)
            if e.dagster_event and e.dagster_event.event_type_value == "PIPELINE_FAILURE"
        )
        return failure.message


def test_a_killed_in_process_run_is_failed_by_the_daemon(deployment):
    deployment.start("worker", [sys.executable, "-c", IN_PROCESS])
    message = _killed_and_failed(deployment, "worker")
    assert "no heartbeat from the run worker" in message, message


def test_a_run_whose_code_server_dies_with_its_worker_is_failed_by_the_daemon(deployment):
    launched = subprocess.run(
        [str(BIN / "dagster"), "job", "launch", "-w", str(deployment.workspace), "-j", "slow"],
        cwd=deployment.tmp,
        env=deployment.env,
        capture_output=True,
        text=True,
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    message = _killed_and_failed(deployment, "code")
    assert "no heartbeat from the run worker" in message, message
