"""Four `tracelake run` processes started at the same moment on a new local Dagster home
(SQLite storage, nothing created yet) leave a working instance: all four runs succeed,
every later run too, and the storage's schema is stamped once. Without the lock each
process created and stamped the storage itself, and alembic then found several heads
in it: every later run failed. Two fresh homes, four processes each."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from tests.environments import local_settings

ROOT = Path(__file__).resolve().parents[2]
DAYS = [date(2026, 11, 24) + timedelta(days=i) for i in range(4)]
ROUNDS = 2

# `tracelake run ingest --date DAY` in a process of its own, started once all of them have
# imported the world (a barrier of files), so they open the instance at the same moment
AT_ONCE = """
import sys, time
from pathlib import Path
import pipelines.definitions  # the imports `run` would do, done before the barrier
from pipelines.cli import app

barrier, name, count, day = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
(barrier / name).touch()
while len(list(barrier.iterdir())) < count:
    time.sleep(0.002)
app(["run", "ingest", "--date", day])
"""


def _env(tmp_path: Path, home: Path) -> dict[str, str]:
    settings = local_settings(tmp_path)
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "TRACELAKE_SOURCE": settings.source_uri,
        "TRACELAKE_WAREHOUSE": settings.warehouse_uri,
        "TRACELAKE_STORES": settings.stores_uri,
        "PYTHONPATH": str(ROOT),
    }


def _run_at_once(tmp_path: Path, home: Path, days: list[date]) -> list[subprocess.CompletedProcess]:
    barrier = tmp_path / f"barrier-{home.name}-{len(list(tmp_path.glob('barrier-*')))}"
    barrier.mkdir()
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", AT_ONCE, str(barrier), str(i), str(len(days)), day.isoformat()],
            cwd=tmp_path,
            env=_env(tmp_path, home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, day in enumerate(days)
    ]
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=600), *p.communicate()) for p in processes]


def _heads(home: Path) -> list[str]:
    """The schema versions stamped in the run storage (one when it was created once)."""
    engine = sa.create_engine(f"sqlite:///{home / 'storage' / 'history' / 'runs.db'}")
    with engine.connect() as connection:
        return [row[0] for row in connection.execute(sa.text("SELECT version_num FROM alembic_version"))]


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_four_first_runs_at_once_leave_a_working_instance(tmp_path, round_):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")  # the project's instance file, SQLite storage
    (home / "dagster.yaml").write_text(
        (home / "dagster.yaml").read_text().replace(".tracelake/dagster", str(home))
    )  # its storage under the new home: nothing of it exists yet
    assert not (home / "storage").exists()

    results = _run_at_once(tmp_path, home, DAYS)
    for day, result in zip(DAYS, results, strict=True):
        assert result.returncode == 0, f"{day}: {result.stderr[-3000:]}"
    assert len(_heads(home)) == 1, "the storage was created more than once"

    # every later run works: a fifth process, and the instance read back
    (again,) = _run_at_once(tmp_path, home, DAYS[:1])
    assert again.returncode == 0, again.stderr[-3000:]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs, days = instance.get_runs(), [d.isoformat() for d in [*DAYS, DAYS[0]]]
        # a day's ingest is the load of its one shard (``all``), then its daily run
        assert len(runs) == 2 * len(days)
        assert {r.status for r in runs} == {dg.DagsterRunStatus.SUCCESS}
        by_job = {
            job: sorted(r.tags["dagster/partition"] for r in runs if r.job_name == job) for job in ("load", "ingest")
        }
        assert by_job == {"load": sorted(f"{d}|all" for d in days), "ingest": sorted(days)}
