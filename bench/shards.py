"""Sharded days: peak memory and wall time of one ingest run, whole day vs one shard of it.

    python bench/shards.py                          # 10k, 40k and 160k-call demo days
    python bench/shards.py --sizes 2000,8000        # quick
    python bench/shards.py --calls-per-shard 5000   # shards sized to the day (the default)
    python bench/shards.py --mode hash              # hash:N shards (they merge into every hour)
    python bench/shards.py --nightly 0              # without the whole-nightly comparison

For each day size, one run ingests the whole day (unsharded), then the same day is
ingested as ``hour:N`` shards, N the fewest (of 2, 3, 4, 6, 8, 12, 24 and multiples
of 24) whose largest shard holds at most calls-per-shard calls by source bytes (the
demo's traffic peaks in the afternoon, so hour shards are uneven), one run after
another into one set of tables; with ``--mode hash``, ``hash:N`` with N = calls /
calls-per-shard. Every run is its own OS process; its peak RSS and CPU time are the
kernel's (CPU from ``os.wait4`` rusage; peak RSS the child's own ``VmHWM``), its wall time includes starting Python.
CPU seconds say more than wall time on a loaded machine.

A run is the ingest core as a shard process runs it (tests/production/shard_writer.py:
list the shard, read, parse and assemble in one process, settle with stored calls,
merge calls, spans, quarantine and ingest_log), without Dagster and without redaction:
redaction's memory is its model (constant) plus the rows the run already holds, and its
time is bench/redact.py's. Both variants must land the same calls, spans and ingest_log
keys; the table says so.

Then, for the largest day (``--nightly``), the whole nightly as an operator runs it on one
machine: ``tracelake run nightly`` (every shard's load, then traces and the checks,
retention, rot and judge, redaction with NER as configured by default), once with
``TRACELAKE_SHARDS=1`` and once with the shards above, each into its own warehouse and
Dagster home; wall time, CPU and the peak RSS of its largest process. The shards run one
after another here; a deployment runs them at once through the run queue.

Demo days are generated once and kept under bench/out/shards/ (a 160k-call day takes
minutes to write); tables go to a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

os.environ.setdefault("TRACELAKE_DEMO", "1")
os.environ.setdefault("TRACELAKE_START_DATE", "2024-01-01")

import polars as pl  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from pipelines.demo import generate  # noqa: E402
from pipelines.ingest.shards import HOURS, ShardSpec  # noqa: E402
from pipelines.record.schema import KEYS  # noqa: E402
from pipelines.resources.object_store import ObjectStore  # noqa: E402
from pipelines.resources.warehouse import Warehouse  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "shards"
DAY = date(2026, 11, 29)
SEED = 11
COMPARED = ("calls", "spans", "ingest_log")


@dataclass(frozen=True)
class Run:
    seconds: float
    cpu_seconds: float
    peak_mb: float
    objects: int
    calls: int


def demo_day(calls: int, console: Console) -> tuple[Path, dict]:
    """The cached source folder of a ``calls``-call demo day, generated the first time."""
    folder = OUT / f"day-{calls}"
    done = folder / "summary.json"
    if not done.exists() or not (folder / "stores").exists():
        shutil.rmtree(folder, ignore_errors=True)
        with console.status(f"generating a {calls:,}-call demo day under {folder} (once)"):
            summary = generate(
                str(folder / "source"), calls=calls, days=1, seed=SEED, end=DAY, stores_out=str(folder / "stores")
            )
        done.write_text(
            json.dumps({"calls": summary.calls, "objects": summary.objects, "bytes": summary.bytes_written})
        )
    return folder / "source", json.loads(done.read_text())


def shard_spec(source: Path, summary: dict, mode: str, calls_per_shard: int) -> ShardSpec:
    """The sharding a bench day runs with (see the module's docstring)."""
    if mode == "hash":
        return ShardSpec("hash", max(2, math.ceil(summary["calls"] / calls_per_shard)))
    most = calls_per_shard * summary["bytes"] / summary["calls"]
    for count in (2, 3, 4, 6, 8, 12, *range(HOURS, 100 * HOURS, HOURS)):
        by_shard = ObjectStore(uri=str(source), shards=f"hour:{count}").list_day_by_shard(DAY)
        if max(sum(o.size for o in found) for found in by_shard.values()) <= most:
            return ShardSpec("hour", count)
    raise SystemExit(f"no hour sharding keeps shards under {calls_per_shard} calls")


def _read(file) -> bytes:
    file.seek(0)
    return file.read()


def one_run(source: Path, warehouse: Path, shard: int, spec: ShardSpec) -> Run:
    """One ingest run (shard ``shard`` of ``spec``; the whole day for ``1``) in a process of its own."""
    argv = [sys.executable, "-m", "tests.production.shard_writer", str(source), str(warehouse), ""]
    started = time.perf_counter()
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        # files, not pipes: the child would block on a full pipe that nobody reads during wait4
        process = subprocess.Popen(
            [*argv, DAY.isoformat(), str(shard), str(spec) if spec.sharded else "1"],
            cwd=ROOT,
            stdout=stdout,
            stderr=stderr,
        )
        # wait4 gives this child's own rusage: its CPU time (ru_maxrss, see below, is not its own peak)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        out, err = _read(stdout), _read(stderr)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"shard {shard} of {spec} failed ({process.returncode}):\n{err.decode()[-3000:]}")
    report = json.loads(out.decode().strip().splitlines()[-1])
    calls = next(m["rows_in"] for m in report["merges"] if m["table"] == "calls")
    # the child's own VmHWM: ru_maxrss also counts the parent's peak, which Linux carries across
    # fork + exec (after generating a 160k-call day in this process, ~1.5 GB in every early child)
    peak = report.get("peak_rss_mb") or usage.ru_maxrss / 1024
    return Run(seconds, usage.ru_utime + usage.ru_stime, peak, report["objects"], calls)


def nightly(source: Path, shards: str, tmp: Path) -> Run:
    """``tracelake run nightly`` for the bench day with ``TRACELAKE_SHARDS=shards``, in a process of its own."""
    home = tmp / f"home-{shards.replace(':', '-')}"
    home.mkdir()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "TRACELAKE_SOURCE": str(source),
        "TRACELAKE_STORES": str(source.parent / "stores"),  # what the day's calls were rendered from
        "TRACELAKE_WAREHOUSE": str(tmp / f"warehouse-{shards.replace(':', '-')}"),
        "TRACELAKE_SHARDS": shards,
        "TRACELAKE_LLM": "off",
    }
    tracelake = str(Path(sys.executable).with_name("tracelake"))
    started = time.perf_counter()
    with tempfile.TemporaryFile() as output:  # a file: a pipe nobody reads during wait4 fills and blocks the run
        process = subprocess.Popen(
            [tracelake, "run", "nightly", "--date", DAY.isoformat()],
            cwd=tmp,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        out = _read(output).decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the nightly with TRACELAKE_SHARDS={shards} failed:\n{out[-3000:]}")
    calls = Warehouse(uri=env["TRACELAKE_WAREHOUSE"]).read("calls", columns=["call_id"]).height
    # ru_maxrss of wait4: the largest process among it and its children (the redaction workers)
    return Run(seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, 0, calls)


def _keys(warehouse: Path, table: str) -> pl.DataFrame:
    return Warehouse(uri=str(warehouse)).read(table, columns=list(KEYS[table])).sort(list(KEYS[table]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,40000,160000", help="calls per demo day, comma-separated")
    parser.add_argument("--calls-per-shard", type=int, default=5000, help="shards sized to the day: at most this")
    parser.add_argument(
        "--mode", choices=("hour", "hash"), default="hour", help="hour:N (the default) or hash:N shards"
    )
    parser.add_argument(
        "--nightly",
        type=int,
        default=None,
        help="calls of the day for the whole-nightly comparison (default: the largest; 0: none)",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]  # "": the nightly comparison alone
    console = Console(width=None if sys.stdout.isatty() else 180)
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    for calls in sizes:
        source, summary = demo_day(calls, console)
        spec = shard_spec(source, summary, args.mode, args.calls_per_shard)
        shards = spec.count
        with tempfile.TemporaryDirectory(prefix="tracelake-shards-") as tmp:
            whole_wh, split_wh = Path(tmp) / "whole", Path(tmp) / "sharded"
            with console.status(f"{summary['calls']:,} calls: the whole day in one run"):
                whole = one_run(source, whole_wh, 0, ShardSpec())
            runs = []
            with Progress(console=console, transient=True) as progress:
                task = progress.add_task(f"{summary['calls']:,} calls: {spec} shard runs", total=shards)
                for shard in range(shards):
                    runs.append(one_run(source, split_wh, shard, spec))
                    progress.advance(task)
            same = all(_keys(whole_wh, t).equals(_keys(split_wh, t)) for t in COMPARED)
        assert sum(r.objects for r in runs) == whole.objects == summary["objects"]
        rows.append((summary, whole, spec, runs, same))
        worst = max(runs, key=lambda r: r.peak_mb)
        console.print(
            f"{summary['calls']:,} calls: whole day {whole.peak_mb:,.0f} MB / {whole.seconds:.1f} s; "
            f"{spec}: at most {worst.peak_mb:,.0f} MB ({worst.seconds:.1f} s, {worst.calls:,} calls) a run"
        )

    table = Table(
        title=f"One ingest run: the whole day vs one shard ({args.mode} shards of ≤ ~{args.calls_per_shard:,} calls)"
    )
    for name in ("calls", "objects", "source MB"):
        table.add_column(name, justify="right")
    for name in ("whole: peak RSS", "wall", "CPU"):
        table.add_column(name, justify="right", style="yellow")
    for name in (
        "shards",
        "calls (max)",
        "shard: peak RSS (max)",
        "wall (mean/max)",
        "CPU (mean)",
        "CPU first/last",
        "all wall",
    ):
        table.add_column(name, justify="right", style="green")
    table.add_column("RSS whole/shard", justify="right")
    table.add_column("same rows", justify="center")
    for summary, whole, spec, runs, same in rows:
        peak, shards = max(r.peak_mb for r in runs), spec.count
        table.add_row(
            f"{summary['calls']:,}",
            f"{summary['objects']:,}",
            f"{summary['bytes'] / 1e6:,.0f}",
            f"{whole.peak_mb:,.0f} MB",
            f"{whole.seconds:.1f} s",
            f"{whole.cpu_seconds:.1f} s",
            str(spec),
            f"{max(r.calls for r in runs):,}",
            f"{peak:,.0f} MB",
            f"{sum(r.seconds for r in runs) / shards:.1f}/{max(r.seconds for r in runs):.1f} s",
            f"{sum(r.cpu_seconds for r in runs) / shards:.1f} s",
            # the last shard merges into the tables the others filled: what it costs more is the merge
            f"{runs[0].cpu_seconds:.1f}/{runs[-1].cpu_seconds:.1f} s",
            f"{sum(r.seconds for r in runs):.1f} s",
            f"{whole.peak_mb / peak:.2f}x",
            "yes" if same else "[red]NO[/red]",
        )
    if rows:
        console.print(table)
        peaks = [max(r.peak_mb for r in runs) for _, _, _, runs, _ in rows]
        spread = max(peaks) / min(peaks)
        console.print(
            f"largest shard's peak across the day sizes: {min(peaks):,.0f}-{max(peaks):,.0f} MB, "
            f"max/min {spread:.2f}x ({'within' if spread <= 1.15 else 'NOT within'} 15%)"
        )
        console.print(f"load: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")

    size = max(sizes, default=0) if args.nightly is None else args.nightly
    if size:
        source, summary = demo_day(size, console)
        spec = shard_spec(source, summary, args.mode, args.calls_per_shard)
        runs = {}
        with tempfile.TemporaryDirectory(prefix="tracelake-nightly-") as tmp:
            for shards in ("1", str(spec)):
                with console.status(
                    f"{summary['calls']:,} calls: tracelake run nightly with TRACELAKE_SHARDS={shards}"
                ):
                    runs[shards] = nightly(source, shards, Path(tmp))
        table = Table(
            title=f"The whole nightly (tracelake run nightly) of a {summary['calls']:,}-call day, one machine"
        )
        for name in ("TRACELAKE_SHARDS", "wall", "CPU", "peak RSS (largest process)", "calls stored"):
            table.add_column(name, justify="right")
        for shards, run in runs.items():
            table.add_row(
                shards, f"{run.seconds:.0f} s", f"{run.cpu_seconds:.0f} s", f"{run.peak_mb:,.0f} MB", f"{run.calls:,}"
            )
        console.print(table)
        whole, split = runs["1"], runs[str(spec)]
        console.print(
            f"sharded/unsharded: wall {split.seconds / whole.seconds:.2f}x, "
            f"CPU {split.cpu_seconds / whole.cpu_seconds:.2f}x, peak {split.peak_mb / whole.peak_mb:.2f}x; "
            f"load {os.getloadavg()[0]:.2f}"
        )


if __name__ == "__main__":
    main()
