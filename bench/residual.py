"""The residual-PII scan's share of the ingest stage, measured inside the stage.

    python bench/residual.py                 # the 40,000-call demo day
    python bench/residual.py --calls 4000    # quick
    python bench/residual.py --tree DIR      # another checkout's code (e.g. main's, for "before")
    python bench/residual.py --screen-batch --calls 10000  # the text screen row by row vs TextScreen.rows

Runs the `ingest` job in process, as bench/ingest.py's stage half does, and
times the two parts of the residual scan where they run:

- the screen inside the redactor (``residual.TextScreen`` over the text
  columns where each shard is redacted, ``residual.RowScreen`` over the
  identifier columns in the calling process): its CPU-seconds from the
  redaction's stats (workers included), and the wall and CPU time the calling
  process spends in it (the process the stage waits on; the workers' share
  runs beside it);
- the identifier values judged on Arrow before redaction
  (``ingest_plan.settled_identifiers``, where this checkout has it): wall and
  CPU-seconds, counted in both of the above (it runs in the calling process);
- the blocking residual-PII asset checks of `calls`, `spans` and
  `quarantine`: their reads of the tables and ``residual.residual_pii_check``
  (the scan and Great Expectations), wall and CPU-seconds (all threads).

Shares are of the whole stage's wall time and CPU-seconds (this process and
the redaction workers) in the same run.

``--screen-batch``: no stage. The day is redacted in one process (no NER)
and the text column values the redactor hands its screen are kept; then the
text screen runs over them as the redactor runs it (``TextScreen.row`` per
row) and batched (``TextScreen.rows``: one polars search first), CPU-seconds
of each, best of three, and whether both found the same classes.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("TRACELAKE_DEMO", "1")
os.environ.setdefault("TRACELAKE_START_DATE", "2024-01-01")

DAY = date(2026, 11, 29)
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _in_residual_check() -> bool:
    """Whether the caller runs inside a residual-PII asset check (its body has the redaction resource)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "check" and frame.f_code.co_filename.endswith("quality.py"):
            return "redaction" in frame.f_locals
        frame = frame.f_back
    return False


def instrument(spent: dict[str, list[float]], screen_stats: list[dict[str, int]]) -> None:
    """Wrap the functions the two parts run, adding (wall, CPU) to ``spent``."""
    from pipelines.redact import residual
    from pipelines.redact.redactor import Redactor
    from pipelines.resources.warehouse import Warehouse

    def timed(owner: Any, name: str, part: str, when: Callable[[], bool] = lambda: True) -> None:
        original = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not when():
                return original(*args, **kwargs)
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                spent[part][0] += time.perf_counter() - wall
                spent[part][1] += time.process_time() - cpu

        setattr(owner, name, wrapper)

    timed(Warehouse, "read", "check: reads", _in_residual_check)
    timed(residual, "residual_pii_check", "check: scan and Great Expectations")
    # the screen's work in this process (the workers' is in the redaction's stats): the text
    # screen of its own chunks (with its polars search) and the identifier screen of every row
    timed(residual.TextScreen, "rows", "screen: here")
    import pipelines.ingest.plan as ingest_plan

    if hasattr(ingest_plan, "settled_identifiers"):  # tenth round's: identifier values judged on Arrow first
        timed(ingest_plan, "settled_identifiers", "screen: on Arrow")
    if hasattr(residual, "RowScreen"):  # this round's, one for every shard of a redaction
        timed(residual.RowScreen, "residuals", "screen: here")
        if hasattr(residual.RowScreen, "settled_column"):  # tenth round's: block hashes judged where made
            timed(residual.RowScreen, "settled_column", "screen: here")  # (here only without workers)
    else:  # main's before it
        import pipelines.redact.redactor as redactor_module

        timed(residual, "row_residuals", "screen: here")
        redactor_module.row_residuals = residual.row_residuals
    original = Redactor.redact_rows

    def redact_rows(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        screen_stats.append(dict(result.stats))
        return result

    Redactor.redact_rows = redact_rows


def screen_batch(calls: int, seed: int) -> None:
    """The text screen of one day row by row and batched, in this process."""
    from pipelines.demo import generate
    from pipelines.ingest.objects import SourceObject, ingest_object
    from pipelines.redact.keys import KeyRing
    from pipelines.redact.policy import load_policy
    from pipelines.redact.redactor import Redactor
    from pipelines.redact.residual import PATTERNS, TextScreen
    from pipelines.resources.object_store import ObjectStore

    kept: list[list[tuple[str, str, str]]] = []
    row = TextScreen.row

    def keeping(self: TextScreen, written: Any) -> tuple[str, ...]:
        kept.append(list(written))
        return row(self, kept[-1])

    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp, calls, 1, seed, DAY)
        store = ObjectStore(uri=tmp)
        day_calls, day_spans = [], []
        for info in store.list_day(DAY):
            obj = SourceObject(
                info.key, store.uri_for(info.key), info.etag, info.size, info.last_modified, store.read(info.key)
            )
            batch = ingest_object(obj, DAY, "bench", datetime.now(UTC))
            day_calls += batch.calls
            day_spans += batch.spans
    policy = load_policy()
    TextScreen.row = keeping
    try:
        with Redactor(
            policy, "placeholder", KeyRing.from_secrets("bench", {"bench": "bench-key-0123456789abcdef"}), 1, ner=False
        ) as redactor:
            redactor.redact_rows(day_calls, day_spans, screen=PATTERNS)
    finally:
        TextScreen.row = row
    timings: dict[str, float] = {}
    found = {}
    for name, run in (
        ("row by row (TextScreen.row)", lambda screen: [screen.row(values) for values in kept]),
        ("batched (TextScreen.rows)", lambda screen: screen.rows(kept)),
    ):
        best = None
        for _ in range(3):
            screen = TextScreen(policy, PATTERNS)
            started = time.process_time()
            found[name] = run(screen)
            spent = time.process_time() - started
            best = spent if best is None else min(best, spent)
        timings[name] = best
    values = sum(map(len, kept))
    print(f"text screen, one {len(day_calls):,}-call day: {len(kept):,} rows, {values:,} text column values")
    for name, spent in timings.items():
        print(f"  {name:32} {spent:6.3f} CPU-s")
    same = len({tuple(v) for v in found.values()}) == 1
    held = sum(map(bool, next(iter(found.values()))))
    print(f"  same classes: {same}; rows with a class: {held}; load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--tree", type=Path, help="a checkout whose pipelines/ and assets/ to run (default: this one)")
    parser.add_argument("--screen-batch", action="store_true", help="the text screen row by row vs batched, no stage")
    args = parser.parse_args()
    if args.screen_batch:
        screen_batch(args.calls, args.seed)
        return
    tree = (args.tree or Path(__file__).resolve().parents[1]).resolve()
    if not (tree / "pipelines").is_dir():
        parser.error(f"--tree {tree}: no pipelines/ there; give a checkout (git worktree add --detach DIR main)")
    sys.path.insert(0, str(tree))  # spawned redaction workers get the same path

    import dagster as dg

    import pipelines
    from pipelines.demo import generate
    from pipelines.settings import Settings
    from tests.environments import run_stage

    spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    screen_stats: list[dict[str, int]] = []
    instrument(spent, screen_stats)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        summary = generate(str(root / "source"), args.calls, 1, args.seed, DAY)
        settings = Settings.from_env()
        settings = type(settings)(
            **{**settings.__dict__, "source_uri": str(root / "source"), "warehouse_uri": str(root / "warehouse")}
        )
        cpu, wall = _cpu(), time.perf_counter()
        # the load of every shard of the day, then the ingest job, as `tracelake run ingest` runs it
        result = run_stage(settings, "ingest", DAY.isoformat(), dg.DagsterInstance.ephemeral(), run_config=QUIET)
        stage_s, stage_cpu = time.perf_counter() - wall, _cpu() - cpu
        assert result.success
    screen_cpu = sum(s.get("screen_cpu_ms", 0) for s in screen_stats) / 1000
    here_s, here_cpu = spent.pop("screen: here", [0.0, 0.0])
    # identifier values judged on the schema check's Arrow columns, in this process, outside the redactor
    arrow_s, arrow_cpu = spent.pop("screen: on Arrow", [0.0, 0.0])
    screen_cpu, here_s, here_cpu = screen_cpu + arrow_cpu, here_s + arrow_s, here_cpu + arrow_cpu
    check = [(name, *spent[name]) for name in ("check: reads", "check: scan and Great Expectations")]
    check_s, check_cpu = sum(s for _, s, _ in check), sum(c for _, _, c in check)
    print(f"ingest stage, one {summary.calls:,}-call demo day, code from {Path(pipelines.__file__).parents[1]}")
    print(f"  {'part':52} {'wall s':>7} {'CPU-s':>7} {'of wall':>8} {'of CPU':>7}")

    def row(name: str, seconds: float | None, cpu_s: float) -> None:
        wall = ("", "") if seconds is None else (f"{seconds:.2f}", f"{seconds / stage_s:.1%}")
        print(f"  {name:52} {wall[0]:>7} {cpu_s:7.2f} {wall[1]:>8} {cpu_s / stage_cpu:7.1%}")

    row("stage (this process and the redaction workers)", stage_s, stage_cpu)
    row("screen (all processes)", None, screen_cpu)
    row("  of which in this process", here_s, here_cpu)
    row("    of which on Arrow, before redaction", arrow_s, arrow_cpu)
    for name, seconds, cpu_s in check:
        row(name, seconds, cpu_s)
    row("residual scan: screen + checks", here_s + check_s, screen_cpu + check_cpu)
    print(
        "  wall: the time this process spent in the screen and in the checks, measured where they run;"
        f" load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
