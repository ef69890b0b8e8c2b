"""Shared fixtures: a real S3 server on loopback, buckets, and settings that
point the pipeline at tmp folders or at that server."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import boto3
import dagster as dg
import pytest

# boto3 and delta-rs read credentials from the environment; moto accepts any
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("AWS_ENDPOINT_URL", None)
os.environ.pop("AWS_PROFILE", None)
# Tests run on the published demo hash key, opted into explicitly as the demo
# does (tests/ingest/test_pii_keys.py proves a run without either stops).
os.environ.setdefault("TRACELAKE_DEMO", "1")
# Test days are fixed dates in 2026: partitions from well before them
os.environ.setdefault("TRACELAKE_START_DATE", "2024-01-01")

from tests.environments import S3  # noqa: E402

# moto's ThreadedMotoServer in a process of its own, not a thread of the test
# process: some delta-rs calls (alter.set_table_properties, used by vacuum) hold
# the GIL while they wait for S3, so a server thread beside them could never answer.
SERVE_MOTO = """
import sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
print(f"http://{host}:{port}", flush=True)
sys.stdin.read()  # until the test process closes our stdin
server.stop()
"""


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto's S3 as a real HTTP server on loopback: boto3 and delta-rs (Rust) both talk to it."""
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE_MOTO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        yield process.stdout.readline().strip()
    finally:
        process.stdin.close()
        process.wait(timeout=10)


@pytest.fixture
def s3(moto_endpoint: str) -> S3:
    """A fresh bucket on the loopback S3 server."""
    bucket = f"tl-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return S3(moto_endpoint, bucket)


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture(autouse=True)
def no_definitions_state_from_an_earlier_test() -> Iterator[None]:
    """Each test starts with no current definitions-state storage. Dagster keeps it in a
    context variable that entering an instance sets (`DagsterInstance.__enter__`); a
    context built with an instance and never closed leaves it pointing at that instance,
    and once the instance is gone every later `Definitions` load in the same worker fails
    with "Attempted to resolve undefined DagsterInstance weakref". Production processes
    open one instance for their life; only a test worker runs many in turn."""
    from dagster._core.storage.defs_state.base import set_defs_state_storage

    with set_defs_state_storage(None):
        yield


# The longest files, measured (`pytest --durations`): collected first, so that `--dist loadfile
# --no-loadscope-reorder` (make test) starts them while the other worker runs the many short
# files, instead of leaving one of them to run alone at the end (xdist's own reordering puts
# files with the most tests first).
LONGEST_FIRST = (
    "tests/ingest/test_shards_ui.py",
    "tests/replay/test_ui.py",
    "tests/production/test_postgres_instance.py",
    "tests/production/test_shard_partitions.py",
    "tests/llm/test_batches.py",
    "tests/ingest/test_instance_creation.py",
    "tests/ingest/test_feedback_identity.py",
    "tests/production/test_concurrent_writers.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
