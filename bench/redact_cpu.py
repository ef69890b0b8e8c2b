"""CPU-seconds of the redaction stage in one process, per contender, on a small demo day.

    .venv/bin/python bench/redact_cpu.py                  # 4,000 calls, each contender twice
    .venv/bin/python bench/redact_cpu.py --calls 2000 --rounds 1

Wall time on a shared 2-core machine measures the other processes as much as
the redactor; CPU-seconds of one process (no workers) much less so. Each
contender (this checkout, today's redactor and the one the issue measured, as
in ``bench/redact.py``) runs in a fresh process on the same rows, the
contenders interleaved round by round: ``Redactor.redact_rows`` with
``workers=1``, then the pre-write screen (``residual.scan`` of the tables
about to be written; ``residual.row_residuals`` before issue 32).
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def stage_cpu(tree: str, work: str, everywhere: bool) -> dict[str, float]:
    """Run in the contender's process: ``tree``'s code first on the path."""
    sys.path.insert(0, tree)
    import inspect

    from bench.redact_stage import template_lookup
    from pipelines.redact.keys import KeyRing
    from pipelines.redact.policy import load_policy
    from pipelines.redact.redactor import Redactor

    if everywhere:  # the redactor the issue measured: NER on every system prompt
        Redactor._walker_for = lambda self, call: self.walker
    data = pickle.loads(Path(work).read_bytes())
    calls, spans = data["day"]
    policy = load_policy()
    keys = KeyRing.from_secrets(*data["keys"])
    looks_up = template_lookup(Redactor, data["templates"])
    start = time.process_time()
    with Redactor(policy, "placeholder", keys, 1, ner=True, **looks_up) as redactor:
        result = redactor.redact_rows(calls, spans)
    redacted = time.process_time()
    if "screen" in inspect.signature(Redactor.redact_rows).parameters:  # before issue 32: on row dicts
        from pipelines.redact.residual import row_residuals

        row_residuals(result.calls, "calls", policy)
        row_residuals(result.spans, "spans", policy)
    else:  # the scan of the tables about to be written (their conversion is the write's)
        from pipelines.record.rows import from_columns
        from pipelines.record.schema import TABLES
        from pipelines.redact.residual import scan

        tables = {t: from_columns(rows, TABLES[t]) for t, rows in (("calls", result.calls), ("spans", result.spans))}
        redacted = time.process_time()
        for name, table in tables.items():
            scan(table, name, policy)
    return {"redact_cpu_s": redacted - start, "screen_cpu_s": time.process_time() - redacted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "redact")
    parser.add_argument("--baseline-commit", default=None, help="today's redactor: the code at this commit")
    parser.add_argument("--contender", nargs=3, metavar=("TREE", "WORK", "EVERYWHERE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.contender:
        tree, work, everywhere = args.contender
        print(json.dumps(stage_cpu(tree, work, everywhere == "1")))
        return

    from bench.redact import BASELINE_COMMIT, KEYS, baseline_tree, demo_rows, templates

    calls, spans = demo_rows(args.out, args.calls, args.seed)
    work = args.out / f"cpu-work-{args.calls}calls.pickle"
    work.write_bytes(pickle.dumps({"day": (calls, spans), "keys": KEYS, "templates": templates()}, protocol=5))
    tree = baseline_tree(args.out, args.baseline_commit or BASELINE_COMMIT)
    contenders = {"tracelake": (ROOT, "0"), "today": (tree, "0"), "as the issue measured": (tree, "1")}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, (code, everywhere) in contenders.items():
            command = [sys.executable, __file__, "--contender", str(code), str(work), everywhere]
            runs[name].append(json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout))
    work.unlink()
    print(f"redaction stage CPU-seconds, one process, {len(calls):,} calls and {len(spans):,} spans, NER on")
    print(f"  {'':24} {'redact':>8} {'screen':>8} {'stage':>8} {'screen':>7} {'vs tracelake':>13}")
    best = {name: min(r["redact_cpu_s"] + r["screen_cpu_s"] for r in rs) for name, rs in runs.items()}
    for name, rs in runs.items():
        run = min(rs, key=lambda r: r["redact_cpu_s"] + r["screen_cpu_s"])
        stage = best[name]
        print(f"  {name:24} {run['redact_cpu_s']:8.2f} {run['screen_cpu_s']:8.2f} {stage:8.2f} "
              f"{run['screen_cpu_s'] / stage:7.1%} {stage / best['tracelake']:12.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
