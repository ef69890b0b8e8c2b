"""Fixtures: three days of demo traces (plus planted ones) ingested once by
the real ingest job into a golden warehouse that each test copies; a loopback
S3 server for the tests that need one."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.demo import generate
from pipelines.resources.warehouse import Warehouse
from tests.retention.environment import CALLS_PER_DAY, DAYS, END, S3, ingest, settings_for
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


# moto's ThreadedMotoServer, in a process of its own: some delta-rs calls
# (alter.set_table_properties, used by Warehouse.vacuum) hold the GIL while
# they wait for S3, so a server thread in the test process could never answer.
SERVE_MOTO = """
import sys, time
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
print(f"http://{host}:{port}", flush=True)
sys.stdin.read()  # until the test process closes our stdin
server.stop()
"""


@pytest.fixture(scope="session")
def retention_moto() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE_MOTO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        yield process.stdout.readline().strip()
    finally:
        process.stdin.close()
        process.wait(timeout=10)


@pytest.fixture
def s3(retention_moto: str) -> S3:
    bucket = f"rt-{uuid.uuid4().hex[:12]}"
    store = S3(retention_moto, bucket)
    store.client().create_bucket(Bucket=bucket)
    return store
