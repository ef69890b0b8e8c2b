"""Rot-check throughput on a demo day, next to the ceiling of only hashing the same bytes.

    .venv/bin/python bench/rot.py                              # a 40,000-call day
    .venv/bin/python bench/rot.py --calls 2000                 # small and quick
    .venv/bin/python bench/rot.py --no-per-call-values         # templates print no score, no date

Generates the demo day and its aged stores once (cached under bench/out/rot/),
ingests it into a local Delta warehouse, then in one run measures:

- ceiling: sha256 of every call's recorded request bytes, nothing else;
- per call (before): ``Checker.check_all``, one call at a time, as the asset ran it
  before issue 13 (rows already in memory);
- grouped: ``grouped.check_frame`` on the day's frame (one verdict per class of an
  ingredient set, keyed by the stored ``calls.rot_set_key``; the rest in polars),
  which the asset runs now, the one fast path beside the per-call reference;
- grouped, set keys computed: the same on the day as stored before the key column
  existed (null keys: the check computes them with the same function);
- asset path: read the day's calls from Delta, check, write `rot_checks`: with the grouped
  check and with the per-call one, in turns (what the fast path buys the stage).

It prints calls per second for each, the grouped check's speed-up over the
per-call one and its share of the ceiling, and fails if the two disagree on
any call.
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
from pipelines.ingest.objects import SourceObject, ingest_object  # noqa: E402
from pipelines.record.set_key import KEY_COLUMN  # noqa: E402
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
from pipelines.rot.grouped import VERDICT_FIELDS, check_frame  # noqa: E402
from pipelines.rot.table import rot_rows  # noqa: E402

DAY = date(2026, 11, 20)


def prepare(
    out: Path, calls: int, seed: int, per_call_values: bool = True, long_prompt_calls: int = 0
) -> tuple[Warehouse, str]:
    """The demo day ingested into a Delta warehouse (reused when already there); ``long_prompt_calls``
    adds the demo's long-prompt route (``pipelines/demo/kb.py``)."""
    suffix = ("" if per_call_values else "-no-per-call-values") + (
        f"-kb{long_prompt_calls}" if long_prompt_calls else ""
    )
    root = out / (f"calls{calls}-seed{seed}" + suffix)
    warehouse = Warehouse(uri=str(root / "warehouse"))
    stores = str(root / "stores")
    table = warehouse.table("calls")
    if table is not None and KEY_COLUMN in table.schema().to_arrow().names:
        return warehouse, stores
    shutil.rmtree(root, ignore_errors=True)
    t = time.perf_counter()
    generate(
        str(root / "source"),
        calls=calls,
        days=1,
        seed=seed,
        end=DAY,
        stores_out=stores,
        per_call_values=per_call_values,
        long_prompt_calls=long_prompt_calls,
    )
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


def timed(fn):
    """(wall seconds, CPU seconds of the process: every thread's), the result."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40_000, help="calls in the demo day (default 40,000)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=5, help="timed repetitions; the best is reported")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "rot")
    parser.add_argument(
        "--no-per-call-values",
        dest="per_call_values",
        action="store_false",
        help="a demo day whose templates print no retrieval score and no date",
    )
    args = parser.parse_args()

    warehouse, stores_uri = prepare(args.out, args.calls, args.seed, args.per_call_values)
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

    # a fresh checker per run: caches start cold, as in a nightly run
    per_call_s, checks = best_of(args.runs, lambda: Checker(ingredients, clock).check_all(calls))
    # the same day handed to the check without rot_set_key: the check computes the keys
    unkeyed = frame.drop(KEY_COLUMN)
    # the ceiling and the grouped check in turns, so that both see the same load
    ceiling_s = grouped_s = grouped_cpu_s = unkeyed_s = float("inf")
    for _ in range(args.runs):
        t, _ = best_of(1, lambda: [hashlib.sha256(b).hexdigest() for b in request_bytes])
        ceiling_s = min(ceiling_s, t)
        t, cpu, verdicts = timed(lambda: check_frame(Checker(ingredients, clock), frame))
        grouped_s, grouped_cpu_s = min(grouped_s, t), min(grouped_cpu_s, cpu)
        t, _ = best_of(1, lambda: check_frame(Checker(ingredients, clock), unkeyed))
        unkeyed_s = min(unkeyed_s, t)
    differ = sum(
        any(getattr(c, name) != row[name] for name in VERDICT_FIELDS)
        for c, row in zip(checks, verdicts.iter_rows(named=True), strict=True)
    )
    if differ:
        sys.exit(f"the grouped check disagrees with the per-call check on {differ} of {n} calls")

    def no_rot_checks() -> None:
        """Each timed write starts from no `rot_checks`, as a day's first check does: every run
        writes the same partition (today's), which grew by a day's checks per run, across runs."""
        shutil.rmtree(Path(warehouse.uri) / "rot_checks", ignore_errors=True)

    def asset_path() -> int:
        day = warehouse.read("calls", pl.col("occurred_date") == DAY, list(CALL_COLUMNS))
        checked_at = datetime.now(UTC)
        done = check_frame(Checker(ingredients, checked_at), day)
        return warehouse.merge(
            "rot_checks", rot_rows(done, ingredients, checked_at, "bench"), partitions=[checked_at.date()]
        ).rows_in

    def asset_path_per_call() -> int:
        day = warehouse.read("calls", pl.col("occurred_date") == DAY, list(CALL_COLUMNS))
        checked_at = datetime.now(UTC)
        done = Checker(ingredients, checked_at).check_all(day.iter_rows(named=True))
        return warehouse.merge(
            "rot_checks", rot_rows(done, ingredients, checked_at, "bench"), partitions=[checked_at.date()]
        ).rows_in

    asset_s = asset_per_call_s = float("inf")
    for _ in range(args.runs):  # in turns, so that both see the same load
        no_rot_checks()
        asset_s = min(asset_s, best_of(1, asset_path)[0])
        no_rot_checks()
        asset_per_call_s = min(asset_per_call_s, best_of(1, asset_path_per_call)[0])

    ceiling = len(request_bytes) / ceiling_s
    statuses = Counter(c.status for c in checks)
    kind = "" if args.per_call_values else " (templates print no per-call values)"
    print(f"rot check on a {n:,}-call demo day{kind}, {mb:.1f} MB of recorded requests, best of {args.runs}")
    print("  statuses: " + ", ".join(f"{k} {v:,}" for k, v in statuses.most_common()))
    print(f"  {'ceiling (sha256 of the recorded bytes only)':48} {ceiling:>12,.0f} calls/s")
    print(f"  {'per call (Checker.check_all, before)':48} {n / per_call_s:>12,.0f} calls/s")
    print(f"  {'grouped (check_frame, same verdicts)':48} {n / grouped_s:>12,.0f} calls/s")
    print(f"  {'grouped, set keys computed (calls stored before)':48} {n / unkeyed_s:>12,.0f} calls/s")
    print(f"  {'asset path (Delta read + grouped + merge)':48} {n / asset_s:>12,.0f} calls/s ({asset_s:.2f} s)")
    print(
        f"  {'asset path (Delta read + per call + merge)':48} {n / asset_per_call_s:>12,.0f} calls/s "
        f"({asset_per_call_s:.2f} s): the grouped check saves {1 - asset_s / asset_per_call_s:.0%} of the asset path"
    )
    print(f"  grouped / per call: {per_call_s / grouped_s:.1f}x; grouped / ceiling: {(n / grouped_s) / ceiling:.0%}")
    print(
        f"  grouped check {grouped_s * 1e3:.0f} ms wall, {grouped_cpu_s * 1e3:.0f} ms CPU;"
        f" ceiling {ceiling_s * 1e3:.0f} ms on one thread"
        f" (CPU share {ceiling_s / grouped_cpu_s:.0%})"
    )


if __name__ == "__main__":
    main()
