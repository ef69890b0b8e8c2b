"""Ingest throughput: tracelake's ingest stage against a naive loader, same day, same run.

    python bench/ingest.py              # a 40,000-call demo day
    python bench/ingest.py --calls 2000 # quick

The naive baseline is what a first version usually is: json.loads per line,
a pandas frame per object (nested values as JSON text), one write_deltalake
append per object. It validates nothing, hashes nothing, dedupes nothing and
is not idempotent, so it is a floor on the work, not a peer. tracelake's
number is the whole `ingest` stage as Dagster runs it: list, skip unchanged,
read, validate and normalize, hash, assemble, merge into Delta, roll up
traces, and run the Great Expectations checks.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import date
from pathlib import Path

import dagster as dg
import pandas as pd
from deltalake import write_deltalake
from rich.console import Console
from rich.table import Table

from pipelines.definitions import build
from pipelines.demo import generate
from pipelines.formats import is_line_delimited
from pipelines.resources.object_store import ObjectStore
from pipelines.settings import Settings

DAY = date(2026, 11, 29)
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def naive(source: Path, warehouse: Path) -> tuple[int, int]:
    """(records, uncompressed bytes) loaded the naive way."""
    store = ObjectStore(uri=str(source))
    records = size = 0
    for info in store.list_day(DAY):
        data = store.read(info.key)
        size += len(data)
        lines = data.splitlines() if is_line_delimited(info.key) else [data]
        rows = [json.loads(line) for line in lines if line.strip()]
        flat = [{k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in r.items()} for r in rows]
        frame = pd.DataFrame(flat).astype("string")
        write_deltalake(str(warehouse / "raw"), frame, mode="append", schema_mode="merge")
        records += len(rows)
    return records, size


def tracelake(source: Path, warehouse: Path) -> int:
    settings = Settings.from_env()
    settings = type(settings)(**{**settings.__dict__, "source_uri": str(source), "warehouse_uri": str(warehouse)})
    job = build(settings).resolve_job_def("ingest")
    result = job.execute_in_process(
        partition_key=DAY.isoformat(), instance=dg.DagsterInstance.ephemeral(), run_config=QUIET
    )
    assert result.success
    return settings.warehouse().read("calls").height


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        summary = generate(str(root / "source"), args.calls, 1, args.seed, DAY)
        console.print(
            f"demo day: {summary.calls:,} calls in {summary.objects} objects "
            f"({summary.bytes_written / 1e6:.1f} MB compressed), {os.cpu_count()} cores"
        )

        started = time.perf_counter()
        records, raw_bytes = naive(root / "source", root / "naive")
        naive_s = time.perf_counter() - started

        started = time.perf_counter()
        calls = tracelake(root / "source", root / "warehouse")
        ours_s = time.perf_counter() - started

    mb = raw_bytes / 1e6
    table = Table(title=f"ingest, one {summary.calls:,}-call day ({mb:.0f} MB of JSON)")
    for column in ("loader", "seconds", "calls/s", "MB/s"):
        table.add_column(column, justify="left" if column == "loader" else "right")
    table.add_row(
        "naive (json + pandas + append per object)",
        f"{naive_s:.1f}",
        f"{summary.calls / naive_s:,.0f}",
        f"{mb / naive_s:.1f}",
    )
    table.add_row("tracelake ingest stage", f"{ours_s:.1f}", f"{calls / ours_s:,.0f}", f"{mb / ours_s:.1f}")
    console.print(table)
    console.print(
        f"ratio (tracelake / naive throughput): [bold]{naive_s / ours_s:.2f}x[/]; "
        f"{records:,} records read by the baseline, {calls:,} calls stored by tracelake"
    )


if __name__ == "__main__":
    main()
