"""Rot-check throughput on a demo day, next to the ceiling of only hashing the same bytes.

    .venv/bin/python bench/rot.py                 # a 40,000-call day
    .venv/bin/python bench/rot.py --calls 2000    # small and quick

Generates the demo day and its aged stores once (cached under bench/out/rot/),
ingests it into a local Delta warehouse, then in one run measures:

- ceiling: sha256 of every call's recorded request bytes, nothing else;
- check: re-render + compare + classify every call (rows already in memory);
- asset path: read the day's calls from Delta, check, write `rot_checks`.

and prints calls per second for each and the ratio of the ceiling to the check.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import time
from collections import Counter
from datetime import UTC, date, datetime
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.demo import generate  # noqa: E402
from pipelines.ingest import SourceObject, ingest_object  # noqa: E402
from pipelines.resources.object_store import ObjectStore  # noqa: E402
from pipelines.resources.stores import (  # noqa: E402
    DocumentStore,
    ModelAliasStore,
    ParamsStore,
    TemplateStore,
    load_ingredients,
)
from pipelines.resources.warehouse import Warehouse  # noqa: E402
from pipelines.rot.check import CALL_COLUMNS, Checker  # noqa: E402
from pipelines.rot.table import rot_rows  # noqa: E402

DAY = date(2026, 11, 20)


def prepare(out: Path, calls: int, seed: int) -> tuple[Warehouse, str]:
    """The demo day ingested into a Delta warehouse (reused when already there)."""
    root = out / f"calls{calls}-seed{seed}"
    warehouse = Warehouse(uri=str(root / "warehouse"))
    stores = str(root / "stores")
    if warehouse.table("calls") is not None:
        return warehouse, stores
    shutil.rmtree(root, ignore_errors=True)
    t = time.perf_counter()
    generate(str(root / "source"), calls=calls, days=1, seed=seed, end=DAY, stores_out=stores)
    print(f"generated the demo day in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    t = time.perf_counter()
    source = ObjectStore(uri=str(root / "source"))
    now = datetime.now(UTC)
    rows = []
    for info in source.list_day(DAY):
        obj = SourceObject(
            info.key, source.uri_for(info.key), info.etag, info.size, info.last_modified, source.read(info.key)
        )
        rows += ingest_object(obj, DAY, "bench", now).calls
    warehouse.merge("calls", rows)
    print(f"ingested {len(rows)} calls in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return warehouse, stores


def best_of(runs: int, fn):
    times, result = [], None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40_000, help="calls in the demo day (default 40,000)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=3, help="timed repetitions; the best is reported")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "rot")
    args = parser.parse_args()

    warehouse, stores_uri = prepare(args.out, args.calls, args.seed)
    frame = warehouse.read("calls", pl.col("occurred_date") == DAY, list(CALL_COLUMNS))
    calls = list(frame.iter_rows(named=True))
    n = len(calls)
    request_bytes = [c["request_json"].encode("utf-8") for c in calls if c["request_json"]]
    mb = sum(map(len, request_bytes)) / 1e6

    where = {"uri": stores_uri}
    stores = (TemplateStore(**where), DocumentStore(**where), ModelAliasStore(**where), ParamsStore(**where))
    versions = frame.select("template_id", "template_version").drop_nulls().unique().iter_rows()
    ingredients = load_ingredients(*stores, versions)
    clock = datetime.now(UTC)

    ceiling_s, _ = best_of(args.runs, lambda: [hashlib.sha256(b).hexdigest() for b in request_bytes])
    # a fresh checker per run: caches start cold, as in a nightly run
    check_s, checks = best_of(args.runs, lambda: Checker(ingredients, clock).check_all(calls))

    def asset_path() -> int:
        day = warehouse.read("calls", pl.col("occurred_date") == DAY, list(CALL_COLUMNS))
        checked_at = datetime.now(UTC)
        done = Checker(ingredients, checked_at).check_all(day.iter_rows(named=True))
        return warehouse.merge(
            "rot_checks", rot_rows(done, ingredients, checked_at, "bench"), partitions=[checked_at.date()]
        ).rows_in

    asset_s, _ = best_of(1, asset_path)

    statuses = Counter(c.status for c in checks)
    print(f"rot check on a {n:,}-call demo day ({mb:.1f} MB of recorded requests), best of {args.runs}")
    print("  statuses: " + ", ".join(f"{k} {v:,}" for k, v in statuses.most_common()))
    print(f"  {'ceiling (sha256 of the recorded bytes only)':48} {len(request_bytes) / ceiling_s:>12,.0f} calls/s")
    print(f"  {'check (re-render, compare, classify)':48} {n / check_s:>12,.0f} calls/s")
    print(f"  {'asset path (Delta read + check + merge)':48} {n / asset_s:>12,.0f} calls/s")
    print(f"  ratio ceiling / check: {(len(request_bytes) / ceiling_s) / (n / check_s):.1f}x")


if __name__ == "__main__":
    main()
