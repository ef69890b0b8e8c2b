"""A run killed mid-way is marked failed, not left STARTED: both instance
files (local dagster.yaml, production deploy/dagster.yaml) turn on the
daemon's run monitoring, and with the local one a run whose process is
killed -9 is failed by the monitoring loop once its runtime limit passes."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._daemon.monitoring import run_monitoring

ROOT = Path(__file__).resolve().parents[2]

SLOW_JOB = textwrap.dedent(
    """
    import time
    import dagster as dg

    @dg.op
    def wait_forever():
        time.sleep(600)

    @dg.job
    def slow():
        wait_forever()

    slow.execute_in_process(instance=dg.DagsterInstance.get())
    """
)


def _instance(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(str(home))


@pytest.mark.parametrize("config", ["dagster.yaml", "deploy/dagster.yaml"])
def test_both_instance_files_turn_run_monitoring_on(config, tmp_path, monkeypatch):
    block = yaml.safe_load((ROOT / config).read_text())["run_monitoring"]
    # the production file's Postgres storage is swapped for SQLite: the monitoring block is what is checked
    home = tmp_path / "home"
    home.mkdir()
    local = {"storage": {"sqlite": {"base_dir": str(tmp_path / "storage")}}, "run_monitoring": block}
    (home / "dagster.yaml").write_text(yaml.safe_dump(local))
    instance = _instance(home)
    assert instance.run_monitoring_enabled
    assert instance.run_monitoring_max_runtime_seconds > 24 * 3600  # outlasts a Message Batch
    assert instance.run_monitoring_start_timeout_seconds > 0
    assert "MONITORING" in instance.get_required_daemon_types()


def test_a_killed_run_is_marked_failed(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.chdir(tmp_path)  # the file's storage paths are relative: they land under tmp_path
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = _instance(home)
    script = tmp_path / "slow_job.py"
    script.write_text(SLOW_JOB)
    worker = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env={**os.environ})
    try:
        deadline = time.monotonic() + 120
        while not (runs := instance.get_runs()) or runs[0].status != dg.DagsterRunStatus.STARTED:
            assert worker.poll() is None and time.monotonic() < deadline, "the run never started"
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    (record,) = instance.get_run_records()
    assert record.dagster_run.status == dg.DagsterRunStatus.STARTED  # what a killed worker leaves behind

    # the daemon's monitoring loop, run once as its runtime limit has passed
    later = time.time() + instance.run_monitoring_max_runtime_seconds + 1
    monkeypatch.setattr(run_monitoring, "get_current_timestamp", lambda: later)
    run_monitoring.monitor_started_run(instance, None, record, dg.get_dagster_logger())
    assert instance.get_run_by_id(record.dagster_run.run_id).status == dg.DagsterRunStatus.FAILURE
