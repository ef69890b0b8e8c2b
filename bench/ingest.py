"""Ingest throughput: tracelake's ingest stage against a naive loader, same day, same run.

    python bench/ingest.py              # a 40,000-call demo day
    python bench/ingest.py --calls 2000 # quick

The naive baseline is what a first version usually is: json.loads per line,
a pandas frame per object (nested values as JSON text), one write_deltalake
append per object. It validates nothing, hashes nothing, dedupes nothing and
is not idempotent.

Against it, two tracelake numbers:

- the ingest core, the same work the baseline does done properly: list, read,
  validate and normalize, hash, assemble, idempotent merges of calls, spans
  and ingest_log (parsing in worker processes);
- the whole `ingest` stage as Dagster runs it, which adds PII redaction (with
  NER when the model is installed), the traces rollup and the quality and
  residual-PII checks. Redaction dominates it; bench/redact.py measures it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime
from pathlib import Path

# demo data on fixed days: the published demo hash key, partitions from well before them
os.environ.setdefault("TRACELAKE_DEMO", "1")
os.environ.setdefault("TRACELAKE_START_DATE", "2024-01-01")

import dagster as dg  # noqa: E402
import pandas as pd  # noqa: E402
from deltalake import write_deltalake  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from pipelines.definitions import build  # noqa: E402
from pipelines.demo import generate  # noqa: E402
from pipelines.formats import is_line_delimited  # noqa: E402
from pipelines.ingest import SourceObject, ingest_objects  # noqa: E402
from pipelines.resources.object_store import ObjectStore  # noqa: E402
from pipelines.resources.warehouse import Warehouse  # noqa: E402
from pipelines.settings import Settings  # noqa: E402

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


def core(source: Path, warehouse: Path) -> int:
    """The asset's load path without Dagster and without redaction."""
    store, tables = ObjectStore(uri=str(source)), Warehouse(uri=str(warehouse))
    infos = store.list_day(DAY)
    with ThreadPoolExecutor(8) as readers:
        objects = readers.map(
            lambda i: SourceObject(i.key, store.uri_for(i.key), i.etag, i.size, i.last_modified, store.read(i.key)),
            infos,
        )
        batch = ingest_objects(objects, DAY, "bench", datetime.now(UTC), workers=os.cpu_count() or 1)
    tables.merge("calls", batch.calls, partitions=batch.dates("calls"))
    tables.merge("spans", batch.spans, partitions=batch.dates("spans"))
    tables.merge("ingest_log", batch.ingest_log)
    return len(batch.calls)


def stage(source: Path, warehouse: Path) -> int:
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
    parser.add_argument("--no-stage", action="store_true", help="skip the full Dagster stage (minutes with NER)")
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
        calls = core(root / "source", root / "core")
        core_s = time.perf_counter() - started

        stage_s = None
        if not args.no_stage:
            started = time.perf_counter()
            stage(root / "source", root / "warehouse")
            stage_s = time.perf_counter() - started

    mb = raw_bytes / 1e6
    table = Table(title=f"ingest, one {summary.calls:,}-call day ({mb:.0f} MB of JSON)")
    for column in ("loader", "seconds", "calls/s", "MB/s"):
        table.add_column(column, justify="left" if column == "loader" else "right")

    def row(name: str, seconds: float, count: int) -> None:
        table.add_row(name, f"{seconds:.1f}", f"{count / seconds:,.0f}", f"{mb / seconds:.1f}")

    row("naive (json + pandas + append per object)", naive_s, summary.calls)
    row("tracelake ingest core (parse, hash, merge)", core_s, calls)
    if stage_s is not None:
        row("tracelake ingest stage (+ redaction, rollup, checks)", stage_s, calls)
    console.print(table)
    console.print(
        f"ratio (tracelake ingest core / naive throughput): [bold]{naive_s / core_s:.2f}x[/]; "
        f"{records:,} records read by the baseline, {calls:,} calls stored by tracelake"
    )


if __name__ == "__main__":
    main()
