"""Four OS processes merge disjoint shards of one day into the same Delta tables on moto's
S3 server, through a proxy that fails 10% of requests (500, 503, or a reset after the
request was applied). Every row lands exactly once: counts and keys equal a single
process's run without faults."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path

import polars as pl

from pipelines.demo import generate
from pipelines.ingest.shards import ShardSpec
from pipelines.record.schema import KEYS
from tests.environments import S3

ROOT = Path(__file__).resolve().parents[2]
DAY = date(2026, 11, 29)
SHARDS = 4
TABLES = ("calls", "spans", "quarantine", "ingest_log")


@contextmanager
def fault_proxy(upstream: str, rate: float, seed: int) -> Iterator[tuple[str, dict]]:
    """The proxy's URL, and its counts (filled in when it stops)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.production.faulty_s3", upstream, str(rate), str(seed)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    counts: dict = {}
    try:
        yield process.stdout.readline().strip(), counts
    finally:
        process.stdin.close()
        counts.update(json.loads(process.stdout.readline() or "{}"))
        process.wait(timeout=30)


def _writer(s3: S3, warehouse_prefix: str, endpoint: str, shard: int, shards: int) -> subprocess.Popen:
    argv = [sys.executable, "-m", "tests.production.shard_writer", s3.uri("raw"), s3.uri(warehouse_prefix), endpoint]
    return subprocess.Popen(
        [*argv, DAY.isoformat(), str(shard), str(shards)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _finish(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err.decode()[-3000:]
    return json.loads(out.decode().strip().splitlines()[-1])


def _keys(s3: S3, prefix: str, table: str) -> pl.DataFrame:
    warehouse = s3.warehouse(prefix)
    return warehouse.read(table, columns=list(KEYS[table])).sort(list(KEYS[table]))


def test_four_writers_through_s3_faults_land_every_row_exactly_once(s3):
    summary = generate(s3.uri("raw"), calls=400, days=1, seed=3, end=DAY, endpoint_url=s3.endpoint_url)
    keys = [k for k in s3.objects("raw/")]
    assert {ShardSpec("hash", SHARDS).shard_of(k) for k in keys} == set(range(SHARDS)), "every shard has objects"

    single = _finish(_writer(s3, "single", s3.endpoint_url, 0, 1))
    with fault_proxy(s3.endpoint_url, rate=0.10, seed=14) as (proxy, counts):
        writers = [_writer(s3, "sharded", proxy, shard, SHARDS) for shard in range(SHARDS)]
        reports = [_finish(w) for w in writers]

    assert counts["requests"] > 200 and min(counts["500"], counts["503"], counts["reset_after_forward"]) > 0, counts
    assert sum(r["objects"] for r in reports) == single["objects"] == summary.objects
    for table in TABLES:
        expected, landed = _keys(s3, "single", table), _keys(s3, "sharded", table)
        assert landed.height == expected.height, f"{table}: {landed.height} rows, one process wrote {expected.height}"
        assert landed.equals(expected), f"{table}: the keys differ from the single-process run"
        assert landed.unique().height == landed.height, f"{table}: a key landed twice"
    assert _keys(s3, "sharded", "calls").height == summary.calls


def test_two_runs_ingesting_one_day_at_once_store_each_row_once(s3):
    """Two unsharded ingests of the same day, started together, five times: each time the
    tables hold exactly what one run alone writes. Both runs see the day empty; the one
    that commits second finds its partitions changed and writes again on the new version."""
    generate(s3.uri("raw"), calls=240, days=1, seed=8, end=DAY, endpoint_url=s3.endpoint_url)
    _finish(_writer(s3, "single", s3.endpoint_url, 0, 1))
    for attempt in range(5):
        prefix = f"twice-{attempt}"
        for report in [_finish(w) for w in [_writer(s3, prefix, s3.endpoint_url, 0, 1) for _ in range(2)]]:
            assert report["objects"] > 0
        for table in TABLES:
            expected, landed = _keys(s3, "single", table), _keys(s3, prefix, table)
            assert landed.equals(expected), f"attempt {attempt}, {table}: {landed.height} rows for {expected.height}"
