"""One investigation on a 40,000-call demo day: `tracelake investigate` against the same steps run as
eight separate commands (find, show, rot, replay --pinned, replay --n, siblings, ablate, promote),
in the same run, on the simulator (real SDK over HTTP; nothing reaches a provider).

    python bench/investigate.py               # a 40,000-call demo day
    python bench/investigate.py --calls 2000  # quick

The day is generated with its ingredient stores, the planted stale document of the debugging tests
is put in one Portuguese answer (tests/debug/conftest.py), and the day is loaded with the ingest core
(no redaction; bench/ingest.py measures that) and rolled up into `traces`. CPU seconds are shown beside
wall seconds (the in-process rows include the simulator's threads): on a shared machine the wall time
also waits for a core. Both ways start from an
empty LLM ledger, so both send their requests; the simulator adds no model latency, so the time in
"LLM round trips" is HTTP to the simulator on this machine plus the ledger's writes, and the rest is
tracelake's own work. Last, the investigation again as a new process (imports included): every answer
is stored, so it sends nothing and costs nothing. The target: under 60 s of tracelake's own time.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: bench/ingest.py loads the day
from bench.ingest import DAY, core  # noqa: E402
from pipelines.demo import generate  # noqa: E402
from pipelines.ingest.traces import rollup  # noqa: E402
from pipelines.record.canonical import call_id  # noqa: E402
from pipelines.resources.warehouse import Warehouse  # noqa: E402
from pipelines.simulator import running  # noqa: E402
from tests.debug.conftest import _plant_bad_call  # noqa: E402

N = 10
# what each run writes and the other would reuse: emptied between them
FRESH = ("llm_requests", "ablations", "regression_cases")


def load(root: Path, calls: int, seed: int) -> tuple[Warehouse, dict]:
    source = root / "source"
    generate(str(source), calls, 1, seed, DAY, stores_out=str(root / "stores"))
    bad = _plant_bad_call(source)
    core(source, root / "warehouse")
    warehouse = Warehouse(uri=str(root / "warehouse"))
    rows = rollup(warehouse.read("calls"), warehouse.read("spans"), DAY, datetime.now(UTC))
    warehouse.merge("traces", rows, partitions=[DAY])
    return warehouse, bad


def _cpu() -> float:
    """CPU seconds of this process and its finished children: on a shared machine, wall time waits for cores."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


class Clock:
    """Wall time and the time inside the LLM round trips (`pipelines.debug.sampling.send`)."""

    def __init__(self) -> None:
        import pipelines.debug.sampling as sampling

        self.sampling, self.original, self.in_llm = sampling, sampling.send, 0.0

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return self.original(*args, **kwargs)
            finally:
                self.in_llm += time.perf_counter() - started

        sampling.send = timed

    @contextmanager
    def measure(self, sim, into: dict):
        self.in_llm, requests, usd = 0.0, len(sim.bills), sim.billed_usd
        started, cpu = time.perf_counter(), _cpu()
        yield
        into.update(
            wall=time.perf_counter() - started,
            cpu=_cpu() - cpu,
            llm=self.in_llm,
            requests=len(sim.bills) - requests,
            usd=sim.billed_usd - usd,
        )


def invoke(*args: str) -> str:
    from typer.testing import CliRunner

    from pipelines.cli import app

    result = CliRunner().invoke(app, list(args))
    if result.exit_code != 0:
        raise SystemExit(f"tracelake {' '.join(args)} failed ({result.exit_code}):\n{result.output}")
    return result.output


def separate(bad_call: str, trace: str, user: str, at: datetime) -> dict[str, str]:
    """The eight commands, each fed the ids the one before printed."""
    window = timedelta(minutes=4)
    found = invoke(
        "find", "--user-id", user, "--from", f"{at - window:%Y-%m-%dT%H:%M}", "--to", f"{at + window:%Y-%m-%dT%H:%M}"
    )
    assert trace in found, found
    outputs = {"find": found, "show": invoke("show", trace), "rot": invoke("rot", bad_call)}
    outputs["replay --pinned"] = invoke("replay", bad_call, "--pinned")
    outputs[f"replay --n {N}"] = invoke("replay", bad_call, "--n", str(N))
    outputs["siblings"] = invoke("siblings", bad_call)
    best = next(line for line in outputs["siblings"].splitlines() if line.startswith("best sibling"))
    outputs["ablate"] = invoke("ablate", bad_call, "--against", best.split()[2].rstrip(":"), "--n", str(N))
    outputs["promote"] = invoke("promote", bad_call, "--dataset", "bench-separate", "--note", "answered in English")
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()
    out = Console()
    with tempfile.TemporaryDirectory(prefix="bench-investigate-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        warehouse, bad = load(root, args.calls, args.seed)
        calls = warehouse.read("calls", columns=["call_id"]).height
        out.print(f"demo day: {calls:,} calls loaded in {time.perf_counter() - started:.0f} s")
        bad_call = call_id("frozen_call", bad["trace_id"], bad["span_id"])
        at = datetime.fromisoformat(bad["occurred_at"])
        os.environ.update(
            TRACELAKE_WAREHOUSE=str(root / "warehouse"),
            TRACELAKE_STORES=str(root / "stores"),
            TRACELAKE_LLM="simulator",
            TRACELAKE_DEMO="1",
            TRACELAKE_START_DATE="2024-01-01",
            COLUMNS="160",
        )
        clock, results = Clock(), {}
        with running() as sim:
            os.environ["TRACELAKE_LLM_URL"] = sim.url
            with clock.measure(sim, results.setdefault("8 separate commands", {})):
                separate(bad_call, bad["trace_id"], bad["user_id"], at)
            for name in FRESH:
                shutil.rmtree(root / "warehouse" / name, ignore_errors=True)
            report = root / "report.html"
            with clock.measure(sim, results.setdefault("tracelake investigate", {})):
                output = invoke(
                    "investigate", "--user-id", bad["user_id"], "--at", f"{at:%Y-%m-%dT%H:%M}", "-o", str(report)
                )
            conclusion = output.splitlines()[output.splitlines().index("Conclusion") + 1].strip()
            with clock.measure(sim, results.setdefault("investigate again, a new process", {})):
                subprocess.run(
                    [
                        str(Path(sys.executable).parent / "tracelake"),
                        "investigate",
                        "--call-id",
                        bad_call,
                        "-o",
                        str(report),
                    ],
                    check=True,
                    capture_output=True,
                )
    table = Table(title=f"one investigation on a {calls:,}-call demo day (simulator, n={N})")
    for column in ("", "wall s", "CPU s", "LLM round trips s", "wall - round trips s", "requests", "LLM cost $"):
        table.add_column(column, justify="right" if column else "left")
    for name, r in results.items():
        own = r["wall"] - r["llm"]
        table.add_row(
            name,
            f"{r['wall']:.1f}",
            f"{r['cpu']:.1f}",
            f"{r['llm']:.1f}",
            f"{own:.1f}",
            str(r["requests"]),
            f"{r['usd']:.4f}",
        )
    out.print(table)
    ratio = results["tracelake investigate"]["wall"] / results["8 separate commands"]["wall"]
    own = results["tracelake investigate"]["wall"] - results["tracelake investigate"]["llm"]
    out.print(f"investigate / separate commands (wall): {ratio:.2f}")
    out.print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    out.print(
        f"target: under 60 s of tracelake's own time: {own:.1f} s (wall - round trips), "
        + ("met" if own < 60 else "NOT met")
    )
    out.print(f"conclusion: {conclusion}", soft_wrap=True, highlight=False)


if __name__ == "__main__":
    main()
