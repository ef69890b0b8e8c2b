"""Debugging speed: `find` and `show` on one 40,000-call demo day, against a
naive read of the same tables in the same run.

    python bench/debug.py              # a 40,000-call demo day
    python bench/debug.py --calls 2000 # quick

The day is loaded with the ingest core (no redaction: it does not change the
tables' shape or size much, and bench/ingest.py measures it) and rolled up into
`traces`. Then, for the busiest user and one of their traces:

- find: `find_traces` (the `traces` rollup, pruned to the window's days, then
  that user's calls) against the naive way, reading `calls` whole and filtering;
- show: `read_trace` + the timeline + its terminal and HTML rendering (the
  trace's day found in `traces`, then that day's partitions) against reading
  `calls` and `spans` whole and filtering;
- the same two, and `tracelake sql`, as the command a person runs (a new process each,
  imports included), beside `python -c pass` (the interpreter's own start) in the same run;
  the promise is under 1.5 s each on a quiet machine.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: bench/ingest.py loads the day
from bench.ingest import DAY, core  # noqa: E402
from pipelines.debug.find import find_traces  # noqa: E402
from pipelines.debug.report_html import render_html  # noqa: E402
from pipelines.debug.tables import read_trace  # noqa: E402
from pipelines.debug.terminal import render_timeline  # noqa: E402
from pipelines.debug.timeline import build_timeline  # noqa: E402
from pipelines.demo import generate  # noqa: E402
from pipelines.ingest.traces import rollup  # noqa: E402
from pipelines.resources.warehouse import Warehouse  # noqa: E402

REPEATS = 5


def timed(action, repeats: int = REPEATS) -> tuple[float, object]:
    """Median seconds over ``repeats`` runs, and the last result."""
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def load(root: Path, calls: int, seed: int) -> tuple[Warehouse, int]:
    summary = generate(str(root / "source"), calls, 1, seed, DAY)
    core(root / "source", root / "warehouse")
    warehouse = Warehouse(uri=str(root / "warehouse"))
    rows = rollup(warehouse.read("calls"), warehouse.read("spans"), DAY, datetime.now(UTC))
    warehouse.merge("traces", rows, partitions=[DAY])
    return warehouse, summary.calls


def show(warehouse: Warehouse, trace_id: str) -> int:
    timeline = build_timeline(read_trace(warehouse, trace_id))
    console = Console(file=io.StringIO(), width=120)
    for renderable in render_timeline(timeline):
        console.print(renderable)
    return len(console.file.getvalue()) + len(render_html(timeline))


def naive_find(warehouse: Warehouse, user_id: str, start: datetime, end: datetime) -> int:
    calls = pl.read_delta(warehouse.table_uri("calls"))
    found = calls.filter(
        (pl.col("user_id") == user_id) & (pl.col("occurred_at") >= start) & (pl.col("occurred_at") < end)
    )
    return found["trace_id"].n_unique()


def naive_show(warehouse: Warehouse, trace_id: str) -> int:
    calls = pl.read_delta(warehouse.table_uri("calls")).filter(pl.col("trace_id") == trace_id)
    spans = pl.read_delta(warehouse.table_uri("spans")).filter(pl.col("trace_id") == trace_id)
    return calls.height + spans.height


def command(args: list[str], warehouse: Warehouse) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `tracelake` process (``args[0] == "python"``: the
    interpreter alone): on a shared machine the CPU time says what the command costs, the
    wall time what load added."""
    env = {**os.environ, "TRACELAKE_WAREHOUSE": warehouse.uri, "COLUMNS": "160"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    program = sys.executable if args[0] == "python" else str(Path(sys.executable).parent / "tracelake")
    subprocess.run(
        [program, *args[1:]] if args[0] == "python" else [program, *args], env=env, check=True, capture_output=True
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_command(args: list[str], warehouse: Warehouse) -> tuple[float, float]:
    runs = [command(args, warehouse) for _ in range(3)]
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        warehouse, calls = load(Path(tmp), args.calls, args.seed)
        console.print(f"demo day: {calls:,} calls loaded and rolled up in {time.perf_counter() - started:.0f} s")
        traces = warehouse.read("traces")
        user = traces.group_by("user_id").len().sort("len", descending=True)["user_id"][0]
        start = datetime(DAY.year, DAY.month, DAY.day, tzinfo=UTC)
        end = start + timedelta(days=1)
        agent = traces.filter((pl.col("user_id") == user) & (pl.col("service") == "agent.orders"))
        trace_id = (agent if agent.height else traces.filter(pl.col("user_id") == user))["trace_id"][0]

        find_s, found = timed(lambda: find_traces(warehouse, [user], start, end))
        naive_find_s, naive_found = timed(lambda: naive_find(warehouse, user, start, end))
        show_s, _ = timed(lambda: show(warehouse, trace_id))
        naive_show_s, _ = timed(lambda: naive_show(warehouse, trace_id))
        window = ["--from", start.isoformat(), "--to", end.isoformat()]
        find_cli, find_cpu = median_command(["find", "--user-id", user, *window], warehouse)
        show_cli, show_cpu = median_command(["show", trace_id], warehouse)
        query = "SELECT service, count(*) AS calls, avg(latency_ms) AS avg_ms FROM calls GROUP BY service"
        commands = {
            "python -c pass": median_command(["python", "-c", "pass"], warehouse),
            "tracelake --help": median_command(["--help"], warehouse),
            "tracelake find": (find_cli, find_cpu),
            "tracelake show": (show_cli, show_cpu),
            "tracelake sql": median_command(["sql", query], warehouse),
        }

    table = Table(title=f"find + show on one {calls:,}-call day (median of {REPEATS}; commands: of 3)")
    for column in ("what", "tracelake s", "naive s", "ratio", "command wall s", "command CPU s"):
        table.add_column(column, justify="left" if column == "what" else "right")
    table.add_row(
        f"find ({found.height} traces of the busiest user)", f"{find_s:.3f}", f"{naive_find_s:.3f}",
        f"{naive_find_s / find_s:.1f}x", f"{find_cli:.2f}", f"{find_cpu:.2f}",
    )  # fmt: skip
    table.add_row(
        "show (an agent session: terminal + HTML)", f"{show_s:.3f}", f"{naive_show_s:.3f}",
        f"{naive_show_s / show_s:.1f}x", f"{show_cli:.2f}", f"{show_cpu:.2f}",
    )  # fmt: skip
    console.print(table)
    started = Table(title="commands as a person runs them (new process, imports included; median of 3)")
    for column in ("command", "wall s", "CPU s", "under 1.5 s"):
        started.add_column(column, justify="left" if column == "command" else "right")
    for name, (wall, cpu) in commands.items():
        started.add_row(name, f"{wall:.2f}", f"{cpu:.2f}", "" if name == "python -c pass" else str(wall < 1.5))
    console.print(started)
    assert found.height == naive_found, "find and the naive read disagree"
    console.print(
        f"under 2 s: find {find_s < 2} in-process, {find_cpu < 2} command CPU; "
        f"show {show_s < 2} in-process, {show_cpu < 2} command CPU; load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
