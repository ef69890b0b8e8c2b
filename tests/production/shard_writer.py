"""One writer of a sharded day, as its own OS process: the ingest core for the objects
of this shard (``hash:SHARDS``, or SHARDS itself as ``hour:48``: pipelines/ingest/shards.py),
merged into the shared Delta tables.

    python -m tests.production.shard_writer SOURCE_URI WAREHOUSE_URI ENDPOINT DAY SHARD SHARDS

The ingest asset's write plan (``pipelines.ingest.plan.plan_day``: parse, settle with
stored calls, then calls, spans, quarantine and ingest_log last), without redaction,
which has nothing to do with how writers share tables. Prints what each merge did, as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import UTC, date, datetime
from pathlib import Path

import polars as pl

from pipelines.ingest.plan import plan_day
from pipelines.resources.object_store import ObjectStore
from pipelines.resources.warehouse import Warehouse, to_arrow

RUN_ID = "shard-test"
NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def write_shard(source: ObjectStore, warehouse: Warehouse, day: date, shard: int, shards: int) -> dict:
    listed = source.list_day(day, shard)

    def read_calls(trace_ids: list[str], days: list[date]) -> list[dict]:
        where = pl.col("trace_id").is_in(trace_ids) & pl.col("occurred_date").is_in(days)
        return to_arrow("calls", warehouse.read("calls", where)).to_pylist()

    # the asset's write plan, without a redactor; other shards write the same day at once
    plan = plan_day(
        listed,
        {},
        lambda todo: map(source.source_object, todo),
        read_calls,
        day=day,
        run_id=RUN_ID,
        now=NOW,
        overrides=source.format_overrides,
    )
    results = [w.merge_into(warehouse) for w in plan.writes]
    return {"shard": shard, "objects": len(listed), "merges": [dataclasses.asdict(r) for r in results]}


def main() -> None:
    source_uri, warehouse_uri, endpoint, day, shard, shards = sys.argv[1:7]
    region = "us-east-1"
    spec = f"hash:{shards}" if shards.isdigit() else shards
    source = ObjectStore(uri=source_uri, endpoint_url=endpoint, region=region, shards=spec)
    warehouse = Warehouse(
        uri=warehouse_uri, endpoint_url=endpoint, region=region, access_key_id="testing", secret_access_key="testing"
    )
    report = write_shard(source, warehouse, date.fromisoformat(day), int(shard), source.shard_spec.count)
    report["peak_rss_mb"] = own_peak_rss_mb()
    print(json.dumps(report, default=str), flush=True)


def own_peak_rss_mb() -> float | None:
    """This process's peak resident set since it started (VmHWM, Linux). Unlike the
    rusage a parent gets from wait4, it does not include the address space the process
    was forked from: Linux carries that peak across exec into ru_maxrss, so a child of a
    parent that once held 1.5 GB reports at least that."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), None)
    return None if kib is None else kib / 1024


if __name__ == "__main__":
    main()
