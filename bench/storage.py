"""Stored bytes per call, per table, before and after the retention sweep, against the raw
JSON and the raw JSON gzipped, in one run.

    .venv/bin/python bench/storage.py                 # the 40,000-call demo day of bench/ingest.py
    .venv/bin/python bench/storage.py --calls 2000    # small and quick

One demo day (``pipelines.demo.generate``, the day and seed of bench/ingest.py) goes
through the stages as the nightly job runs them: ``ingest`` (with redaction),
``retention`` and ``rot``. Every table is compacted and vacuumed (a settled day's
layout) and measured on disk: Parquet bytes and ``_delta_log`` bytes (statistics for
every column of every file) per call of the day. Then the day leaves the hot window: the
retention sweep strips the full text of its ``ingredients``-tier calls, and the tables
are measured again. The keys are stored in full, every row is stored, every column has
statistics: this is what a data team's reader reads. Results go to bench/out/storage/results.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

# demo data on fixed days: the published demo hash key, partitions from well before them
os.environ.setdefault("TRACELAKE_DEMO", "1")
os.environ.setdefault("TRACELAKE_START_DATE", "2024-01-01")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dagster as dg  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from pipelines.definitions import build  # noqa: E402
from pipelines.demo import generate  # noqa: E402
from pipelines.resources.object_store import decompress  # noqa: E402
from pipelines.retention.policy import load_policy  # noqa: E402
from pipelines.retention.sweep import sweep  # noqa: E402
from pipelines.settings import Settings  # noqa: E402

DAY = date(2026, 11, 29)
STAGES = ("ingest", "retention", "rot")
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
OUT = Path(__file__).parent / "out" / "storage"


def raw_bytes(source: Path) -> tuple[int, int]:
    """(raw JSON bytes, those bytes gzipped at level 6) of every source object."""
    raw = packed = 0
    for path in (p for p in source.rglob("*") if p.is_file()):
        data = decompress(path.name, path.read_bytes())
        raw += len(data)
        packed += len(gzip.compress(data, compresslevel=6))
    return raw, packed


def table_bytes(path: Path) -> dict[str, int]:
    data = log = 0
    for file in (p for p in path.rglob("*") if p.is_file()):
        if "_delta_log" in file.parts:
            log += file.stat().st_size
        else:
            data += file.stat().st_size
    return {"data": data, "log": log}


def settle(warehouse, root: Path) -> dict[str, dict[str, int]]:
    """Every table compacted and vacuumed, then measured."""
    names = sorted(p.name for p in root.iterdir() if (p / "_delta_log").is_dir())
    for name in names:
        warehouse.compact(name)
        warehouse.vacuum(name, orphan_grace_hours=0)
    return {name: table_bytes(root / name) for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=40_000, help="calls on the day (default 40,000)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        settings = dataclasses.replace(
            Settings.from_env(),
            source_uri=str(root / "source"),
            warehouse_uri=str(root / "warehouse"),
            stores_uri=str(root / "stores"),
            endpoint_url=None,
        )
        generate(settings.source_uri, args.calls, 1, args.seed, DAY, stores_out=settings.stores_uri)
        raw, packed = raw_bytes(root / "source")
        definitions, instance = build(settings), dg.DagsterInstance.ephemeral()
        started = time.perf_counter()
        for stage in STAGES:
            job = definitions.resolve_job_def(stage)
            assert job.execute_in_process(partition_key=DAY.isoformat(), instance=instance, run_config=QUIET).success
        stages_s = time.perf_counter() - started
        warehouse = settings.warehouse()
        calls = warehouse.read("calls", columns=["call_id"]).height
        before = settle(warehouse, root / "warehouse")
        # the day leaves the hot window: the sweep strips the ingredients tier's text
        policy = load_policy(settings.retention_policy)
        later = DAY + timedelta(days=policy.hot_window_days + 1)
        swept = sweep(warehouse, policy, later, datetime.combine(later, datetime.min.time(), UTC))
        after = settle(warehouse, root / "warehouse")

    def per_call(n: float) -> str:
        return f"{n / calls:,.0f}"

    title = (
        f"stored bytes per call: one demo day, {calls:,} calls; raw JSON {raw / calls:,.0f} bytes/call, "
        f"gzipped {packed / calls:,.0f}; sweep stripped {swept.calls_stripped:,} calls' text"
    )
    table = Table(title=title)
    for column in ("table", "data", "_delta_log", "total", "after sweep", "vs raw JSON", "vs gzip"):
        table.add_column(column, justify="left" if column == "table" else "right")

    def row(name: str, b: dict[str, int], a: dict[str, int]) -> None:
        total, swept_total = b["data"] + b["log"], a["data"] + a["log"]
        table.add_row(
            name, per_call(b["data"]), per_call(b["log"]), per_call(total), per_call(swept_total),
            f"{total / raw:.3f}x → {swept_total / raw:.3f}x", f"{total / packed:.2f}x → {swept_total / packed:.2f}x",
        )  # fmt: skip

    for name in sorted(before, key=lambda n: -(before[n]["data"] + before[n]["log"])):
        row(name, before[name], after.get(name, {"data": 0, "log": 0}))
    total_before = {k: sum(m[k] for m in before.values()) for k in ("data", "log")}
    total_after = {k: sum(m[k] for m in after.values()) for k in ("data", "log")}
    row("all tables", total_before, total_after)
    console.print(table)
    console.print(f"stages {stages_s:.0f} s; load average {os.getloadavg()[0]:.1f}")
    OUT.mkdir(parents=True, exist_ok=True)
    results = {
        "day": DAY.isoformat(),
        "calls": calls,
        "raw_json_bytes": raw,
        "gzip_bytes": packed,
        "before_sweep": before,
        "after_sweep": after,
        "calls_stripped": swept.calls_stripped,
    }
    (OUT / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
