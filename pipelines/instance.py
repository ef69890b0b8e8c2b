"""The Dagster instance that runs started here (the CLI, the demo, a shard process) are recorded in.

A local instance keeps runs, event logs and schedules in SQLite files under its home,
which the first process to open it creates and stamps with their schema version.
Processes opening a new home at the same moment (four shard runs, four days in four
terminals) stamp it more than once; alembic then finds several heads and every later
run fails. So the instance is opened under an exclusive lock on a file in its home:
the first process creates and migrates the storage while the others wait, then they
find it made. Opening an existing instance takes the lock for as long as that takes.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

LOCK_FILE = ".tracelake-instance.lock"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed, or the process dies
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def open_instance() -> dg.DagsterInstance:
    """$DAGSTER_HOME's instance, else the one the project's dagster.yaml describes (the
    working directory's: so `make ui` shows runs the CLI started), else a throwaway one;
    its storage created and migrated by one process at a time."""
    if os.environ.get("DAGSTER_HOME"):
        with _locked(Path(os.environ["DAGSTER_HOME"]) / LOCK_FILE):
            return dg.DagsterInstance.get()
    if Path("dagster.yaml").exists():
        # the file keeps its storage under .tracelake/ (relative): the lock lives there too
        with _locked(Path(".tracelake") / LOCK_FILE):
            return dg.DagsterInstance.from_config(str(Path.cwd()))
    return dg.DagsterInstance.ephemeral()
