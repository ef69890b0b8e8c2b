"""A demo warehouse made the way a user makes one: `tracelake demo` in a fresh folder
(ingest, retention, rot, judge and two replay candidates against the LLM simulator)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.resources.warehouse import Warehouse

TRACELAKE = str(Path(sys.executable).with_name("tracelake"))


def demo_env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACELAKE_", "DAGSTER_"))}
    return {**env, "TRACELAKE_DEMO": "1", "COLUMNS": "200"}


@pytest.fixture(scope="session")
def demo_folder(tmp_path_factory) -> Path:
    """A folder holding `.tracelake/` as `tracelake demo --calls 300 --days 1` left it."""
    folder = tmp_path_factory.mktemp("demo")
    done = subprocess.run(
        [TRACELAKE, "demo", "--calls", "300", "--days", "1"],
        cwd=folder,
        env=demo_env(folder),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return folder


@pytest.fixture(scope="session")
def demo_warehouse(demo_folder: Path) -> Warehouse:
    return Warehouse(uri=str(demo_folder / ".tracelake" / "warehouse"))
