"""Fixtures: three days of demo traces (plus planted ones) ingested once by
the real ingest job into a golden warehouse that each test copies; a loopback
S3 server for the tests that need one."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from pipelines.demo import generate
from pipelines.resources.warehouse import Warehouse
from tests.retention.environment import CALLS_PER_DAY, DAYS, END, ingest, settings_for
from tests.retention.planted import Planted, write_planted


@dataclasses.dataclass(frozen=True)
class Demo:
    root: Path
    planted: Planted

    @property
    def source(self) -> str:
        return str(self.root / "source")


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    root = tmp_path_factory.mktemp("retention-demo")
    generate(str(root / "source"), calls=CALLS_PER_DAY, days=len(DAYS), seed=7, end=END)
    planted = write_planted(str(root / "source"), DAYS[1])
    ingest(settings_for(str(root / "source"), str(root / "warehouse")), DAYS)
    return Demo(root, planted)


@pytest.fixture
def warehouse(demo: Demo, tmp_path: Path) -> Warehouse:
    """A private copy of the ingested demo warehouse."""
    shutil.copytree(demo.root / "warehouse", tmp_path / "warehouse")
    return Warehouse(uri=str(tmp_path / "warehouse"))
