"""Stored bytes per call before and after the retention sweep, against the raw JSON, in one run.

    .venv/bin/python bench/retention.py               # 7 demo days of 2,000 calls
    .venv/bin/python bench/retention.py --calls 300   # small and quick

A 7-day synthetic set (``pipelines.demo.generate``) goes through the real
stages: the ingest job, then the `retention` asset for each day, then the
`retention_sweep` core as of a day when all seven are past the 7-day hot
window. Sizes are bytes on disk:

- raw JSON: the source objects decompressed (what the applications logged),
  and as stored in the bucket (gzip / zstd);
- Delta before the sweep: calls, spans, traces and retention, compacted and
  vacuumed first so that the comparison is about text, not file layout;
- Delta after the sweep (which compacts and vacuums on its own).

The demo's prompts are short (a few hundred tokens) and highly repetitive, so
hashes and ids weigh more here than in production, where one agent prompt is
tens of KB; the text share, and so the saving, grows with prompt size.
Results are printed and written to bench/out/retention/results.json.
"""

from __future__ import annotations

import argparse
import dataclasses
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
import polars as pl  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from assets.retention import RetentionPolicy, retention  # noqa: E402
from pipelines.demo import generate  # noqa: E402
from pipelines.resources.object_store import decompress  # noqa: E402
from pipelines.retention.policy import load_policy  # noqa: E402
from pipelines.retention.sweep import sweep  # noqa: E402
from pipelines.settings import Settings  # noqa: E402
from tests.environments import run_stage  # noqa: E402

END = date(2026, 11, 22)
DAYS = 7
TABLES = ("calls", "spans", "traces", "retention")
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
OUT = Path(__file__).parent / "out" / "retention"


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def raw_sizes(source: Path) -> tuple[int, int]:
    """(decompressed, stored) bytes of every source object."""
    plain = stored = 0
    for path in (p for p in source.rglob("*") if p.is_file()):
        data = path.read_bytes()
        stored += len(data)
        plain += len(decompress(path.name, data))
    return plain, stored


def sizes(warehouse: Path) -> dict[str, int]:
    return {t: disk_bytes(warehouse / t) for t in TABLES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000, help="calls per day (default 2,000)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    console = Console()
    days = [END - timedelta(days=i) for i in reversed(range(DAYS))]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        summary = generate(str(root / "source"), args.calls, DAYS, args.seed, END)
        raw_plain, raw_stored = raw_sizes(root / "source")
        settings = dataclasses.replace(
            Settings.from_env(),
            source_uri=str(root / "source"),
            warehouse_uri=str(root / "warehouse"),
            endpoint_url=None,
        )
        warehouse = settings.warehouse()
        instance = dg.DagsterInstance.ephemeral()
        started = time.perf_counter()
        for day in days:  # the load of every shard of the day, then the ingest job
            assert run_stage(settings, "ingest", day.isoformat(), instance, run_config=QUIET).success
        ingest_s = time.perf_counter() - started

        started = time.perf_counter()
        resources = {"warehouse": warehouse, "retention_policy": RetentionPolicy()}
        for day in days:
            result = dg.materialize(
                [retention], resources=resources, partition_key=day.isoformat(), instance=instance, raise_on_error=True
            )
            assert result.success
        decide_s = time.perf_counter() - started
        calls = warehouse.read("calls", columns=["call_id"]).height
        decided = warehouse.read("retention", columns=["tier"])
        full_share = decided.filter(pl.col("tier") == "full").height / decided.height

        as_ingested = sizes(root / "warehouse")
        for table in TABLES:
            warehouse.compact(table)
            warehouse.vacuum(table, orphan_grace_hours=0)
        before = sizes(root / "warehouse")

        policy = load_policy()
        today = END + timedelta(days=policy.hot_window_days + 1)
        started = time.perf_counter()
        report = sweep(warehouse, policy, today, datetime.now(UTC))
        sweep_s = time.perf_counter() - started
        after = sizes(root / "warehouse")

    def per_call(n: int) -> str:
        return f"{n / calls:,.0f}"

    table = Table(title=f"stored bytes per call: {DAYS} demo days, {calls:,} calls, {full_share:.0%} kept in full")
    for column in ("what", "bytes", "bytes/call", "vs raw JSON"):
        table.add_column(column, justify="left" if column == "what" else "right")
    rows = [
        ("raw JSON, decompressed", raw_plain),
        ("raw JSON, as stored (gzip/zstd)", raw_stored),
        ("Delta as ingested (4 tables)", sum(as_ingested.values())),
        ("Delta before the sweep, compacted", sum(before.values())),
        ("Delta after the sweep", sum(after.values())),
    ]
    for label, n in rows:
        table.add_row(label, f"{n:,}", per_call(n), f"{n / raw_plain:.1%}")
    console.print(table)
    breakdown = Table(title="per table, bytes/call")
    for column in ("table", "before sweep", "after sweep", "after / before"):
        breakdown.add_column(column, justify="left" if column == "table" else "right")
    for t in TABLES:
        breakdown.add_row(t, per_call(before[t]), per_call(after[t]), f"{after[t] / max(before[t], 1):.2f}")
    console.print(breakdown)
    total_before, total_after = sum(before.values()), sum(after.values())
    console.print(
        f"sweep: {report.calls_stripped:,} calls and {report.spans_stripped:,} spans stripped over "
        f"{len(report.days)} days, {report.files_removed} files removed, in {sweep_s:.1f} s "
        f"(ingest {ingest_s:.1f} s, decisions {decide_s:.1f} s)"
    )
    console.print(
        f"after / before the sweep: [bold]{total_after / total_before:.2f}x[/]; "
        f"after / raw JSON: [bold]{total_after / raw_plain:.2f}x[/]; before / raw JSON: {total_before / raw_plain:.2f}x"
    )
    OUT.mkdir(parents=True, exist_ok=True)
    results = {
        "days": DAYS,
        "calls_per_day": args.calls,
        "calls": calls,
        "demo_calls": summary.calls,
        "full_share": full_share,
        "raw_json_bytes": raw_plain,
        "raw_stored_bytes": raw_stored,
        "delta_as_ingested": as_ingested,
        "delta_before_sweep": before,
        "delta_after_sweep": after,
        "calls_stripped": report.calls_stripped,
        "spans_stripped": report.spans_stripped,
        "sweep_seconds": sweep_s,
    }
    (OUT / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
