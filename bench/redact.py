"""The redaction stage on a demo day: this tracelake against today's, same rows, same run.

    .venv/bin/python bench/redact.py                         # a 40,000-call demo day, NER on
    .venv/bin/python bench/redact.py --calls 2000            # small and quick
    .venv/bin/python bench/redact.py --issue-baseline        # also the redactor the issue measured
    .venv/bin/python bench/redact.py --compare HEAD~1        # also other commits' code, same rows, same run

The demo day (``pipelines.demo.generate``) is generated once and cached under
bench/out/redact/, then parsed into `calls` and `spans` rows by the ingest
core. The stage is what ingest runs on those rows: ``Redactor.redact_rows``
(from cold: analyzer start-up and worker spawn included), then the pre-write
residual-PII screen (``residual.scan`` of the Arrow tables about to be written;
their conversion is the write's, outside the stage). A redactor from before
issue 32 screened the rows itself as it made them (``redact_rows(screen=...)``):
its screen is inside its redaction's wall time, and its share is given in
CPU-seconds (the stage's: parent and workers).

Contenders, each on the same rows with the same workers:

- tracelake: this checkout (run the same way);
- today: the code of ``--baseline-commit`` (default: main before issue 13's
  work), extracted with ``git archive`` and run in a subprocess
  (``bench/redact_stage.py``, which runs every contender);
- with ``--issue-baseline``: that code with NER reading every system prompt,
  templated or not, the redactor the issue measured (before commit 1e37f78).

Recall per entity type is measured on the labelled corpora of
``tests/redact`` (regex types, and PERSON names), redacted by each
contender, and printed side by side. MB are the UTF-8 bytes of the
text-bearing columns. Results go to
bench/out/redact/results-<calls>calls-<mode>-ner-<on|off>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.demo import generate  # noqa: E402
from pipelines.demo.stores import aged_stores  # noqa: E402
from pipelines.ingest.objects import SourceObject, ingest_object  # noqa: E402
from pipelines.redact.policy import load_policy  # noqa: E402
from pipelines.redact.redactor import ner_enabled  # noqa: E402
from pipelines.redact.row_fields import FIELDS, JSON, TEXT  # noqa: E402
from pipelines.resources.object_store import ObjectStore  # noqa: E402
from tests.redact.conftest import rows_of  # noqa: E402
from tests.redact.labelled_corpus import TEMPLATES as CORPUS_TEMPLATES  # noqa: E402
from tests.redact.labelled_corpus import build_corpus, person_corpus  # noqa: E402
from tests.redact.test_recall import recall_by  # noqa: E402

# main when issue 13's performance work started (its redactor is "today's")
BASELINE_COMMIT = "25d10d2"
KEYS = ("bench-hash-key", {"bench": "bench-encryption-key-0123456789abcdef"})
DAY = date(2026, 11, 20)


def demo_rows(out: Path, calls: int, seed: int) -> tuple[list[dict], list[dict]]:
    source = out / f"calls{calls}-seed{seed}" / "source"
    if not source.exists():
        t = time.perf_counter()
        generate(str(source), calls=calls, days=1, seed=seed, end=DAY)
        print(f"generated the demo day in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    store = ObjectStore(uri=str(source))
    now = datetime.now(UTC)
    rows_calls, rows_spans = [], []
    for info in store.list_day(DAY):
        data = store.read(info.key)
        obj = SourceObject(info.key, store.uri_for(info.key), info.etag, info.size, info.last_modified, data)
        batch = ingest_object(obj, DAY, "bench", now)
        rows_calls += batch.calls
        rows_spans += batch.spans
    return rows_calls, rows_spans


def text_fields(value: Any, spec: Any) -> Iterator[str]:
    """Every string in the text-bearing columns of a row, column by column."""
    if value is None:
        return
    if spec in (TEXT, JSON):
        if isinstance(value, str):
            yield value
        return
    if isinstance(value, list):
        for item in value:
            yield from text_fields(item, spec)
        return
    for key, sub in spec.items():
        yield from text_fields(value.get(key), sub)


def row_texts(row: dict, table: str) -> list[str]:
    return list(text_fields(row, FIELDS[table]))


def megabytes(rows: list[dict], table: str) -> float:
    return sum(len(t.encode()) for row in rows for t in row_texts(row, table)) / 1e6


def baseline_tree(out: Path, commit: str) -> Path:
    """``pipelines/`` at ``commit``, extracted once under ``out``."""
    try:
        sha = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", commit], check=True, capture_output=True, text=True
        ).stdout.strip()
        tree = out / f"baseline-{sha}"
        if not (tree / "pipelines").exists():
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", "--format=tar", sha, "pipelines"], check=True, capture_output=True
            ).stdout
            tree.mkdir(parents=True, exist_ok=True)
            with tarfile.open(fileobj=BytesIO(archive)) as tar:
                tar.extractall(tree, filter="data")
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"cannot extract the code at {commit!r} with git ({e}); pass --baseline-commit") from None
    return tree


def templates() -> dict[tuple[str, str], str]:
    """The template store the stage looks the calls' templates up in, as ingest would:
    the demo's (as the rot check finds it) and the labelled corpus's."""
    demo = {
        (template_id, version): source
        for template_id, versions in aged_stores(DAY).templates.items()
        for version, source in versions.items()
    }
    return {**demo, **CORPUS_TEMPLATES}


def corpora() -> dict[str, tuple[Any, tuple[list[dict], list[dict]]]]:
    """The labelled corpora of tests/redact: (planted values, canonical rows)."""
    regex_types = build_corpus(traces=120, seed=7)
    names = person_corpus(sentences=300, seed=11)
    return {"regex types": (regex_types, rows_of(regex_types.documents)), "names": (names, rows_of(names.documents))}


def recall(planted: dict[str, Any], blobs: dict[str, str]) -> dict[str, tuple[int, float]]:
    out: dict[str, tuple[int, float]] = {}
    for name, corpus in planted.items():
        out.update(recall_by(corpus.planted, blobs[name], lambda p: p.entity))
    return out


def run_stage(tree: Path, work: Path, out: Path, everywhere: bool = False) -> dict[str, Any]:
    """The stage run by ``bench/redact_stage.py`` on ``tree``'s code, in a fresh process."""
    command = [sys.executable, str(ROOT / "bench" / "redact_stage.py"), str(tree), str(work), str(out)]
    env = {**os.environ, "TRACELAKE_BENCH_NER_EVERYWHERE": "1" if everywhere else "0"}
    subprocess.run(command, check=True, env=env)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40_000, help="calls in the demo day (default 40,000)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2, help="analyzer processes (default 2)")
    parser.add_argument("--ner", choices=("auto", "on", "off"), default="auto", help="person-name NER")
    parser.add_argument("--mode", default="placeholder", choices=("placeholder", "encrypt", "synthetic"))
    parser.add_argument("--baseline-commit", default=BASELINE_COMMIT, help="today's redactor: the code at this commit")
    parser.add_argument("--issue-baseline", action="store_true", help="also the redactor the issue measured")
    parser.add_argument(
        "--compare", action="append", default=[], metavar="COMMIT", help="also the code at COMMIT (repeatable)"
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "redact")
    args = parser.parse_args()

    ner = ner_enabled(load_policy(), None if args.ner == "auto" else args.ner == "on")
    t = time.perf_counter()
    calls, spans = demo_rows(args.out, args.calls, args.seed)
    print(f"parsed {len(calls):,} calls and {len(spans):,} spans in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    mb = megabytes(calls, "calls") + megabytes(spans, "spans")
    planted_and_rows = corpora()
    planted = {name: corpus for name, (corpus, _) in planted_and_rows.items()}
    rows_by_corpus = {name: rows for name, (_, rows) in planted_and_rows.items()}

    tree = baseline_tree(args.out, args.baseline_commit)
    work = args.out / f"work-{args.calls}calls.pickle"
    settings = {"mode": args.mode, "workers": args.workers, "ner": ner, "keys": KEYS, "templates": templates()}
    work.write_bytes(pickle.dumps({**settings, "day": (calls, spans), "corpora": rows_by_corpus}, protocol=5))

    runs: dict[str, dict[str, Any]] = {}
    print("tracelake ...", file=sys.stderr)
    tracelake = run_stage(ROOT, work, args.out / "tracelake.json")
    print("today's redactor ...", file=sys.stderr)
    runs[f"today ({tree.name.removeprefix('baseline-')})"] = run_stage(tree, work, args.out / "today.json")
    if args.issue_baseline:
        print("the issue's redactor ...", file=sys.stderr)
        runs["as the issue measured"] = run_stage(tree, work, args.out / "issue.json", everywhere=True)
    for commit in args.compare:
        other = baseline_tree(args.out, commit)
        name = other.name.removeprefix("baseline-")
        print(f"{name} ...", file=sys.stderr)
        runs[name] = run_stage(other, work, args.out / f"compare-{name}.json")
    runs["tracelake"] = tracelake
    work.unlink()

    report: dict[str, Any] = {
        "day_calls": len(calls),
        "day_spans": len(spans),
        "text_mb": round(mb, 2),
        "ner": ner,
        "mode": args.mode,
        "workers": args.workers,
        "runs": {},
    }
    fast = runs["tracelake"]
    fast_stage = fast["redact_s"] + fast["screen_s"]
    print(f"\nredaction stage on a {len(calls):,}-call demo day: {mb:.1f} MB of text, NER {'on' if ner else 'off'}, "
          f"{args.workers} workers")  # fmt: skip
    print(f"  {'':26} {'redact s':>9} {'screen s':>9} {'stage s':>8} {'MB/s':>6} {'screen':>7} "
          f"{'CPU-s':>7} {'screen CPU-s':>13} {'of CPU':>7} {'speedup':>8}")  # fmt: skip
    for name, run in runs.items():
        stage = run["redact_s"] + run["screen_s"]
        share = run["screen_s"] / stage
        speedup = stage / fast_stage
        cpu, screen_cpu = run.get("stage_cpu_s"), run.get("screen_cpu_s")
        cpu_share = screen_cpu / cpu if cpu and screen_cpu is not None else None
        print(
            f"  {name:26} {run['redact_s']:9.1f} {run['screen_s']:9.2f} {stage:8.1f} {mb / stage:6.2f} "
            f"{share:7.1%} {cpu or 0:7.1f} {screen_cpu or 0:13.2f} {cpu_share or 0:7.1%} {speedup:7.1f}x"
        )
        report["runs"][name] = {
            "redact_seconds": round(run["redact_s"], 2),
            "screen_seconds": round(run["screen_s"], 2),
            "stage_seconds": round(stage, 2),
            "screen_share": round(share, 4),
            "stage_cpu_seconds": round(cpu or 0, 2),
            "screen_cpu_seconds": round(screen_cpu or 0, 2),
            "screen_cpu_share": round(cpu_share or 0, 4),
            "screen_in_redactor": run.get("screen_in_redactor", False),
            "rows_held_by_screen": run["held"],
            "tracelake_speedup": round(speedup, 2),
            "stats": run["stats"],
        }
    print("  (screen s: the screen's wall time after redaction; a redactor that screens its own rows does it")
    print("  inside redact s, the text columns in its workers: its share is the screen's CPU-seconds of the stage's)")
    stats = fast["stats"]
    if "ner_chars" in stats:
        print(f"  tracelake NER read {stats['ner_lines']:,} distinct lines ({stats['ner_chars'] / 1e6:.2f} MB), "
              f"reused {stats['ner_lines_reused']:,} times, {stats.get('ner_lines_received', 0):,} received "
              "from the worker that read them")  # fmt: skip

    recalls = {name: recall(planted, run["corpora"]) for name, run in runs.items()}
    print("\nrecall per entity type on the labelled corpora of tests/redact")
    print(f"  {'entity':16} {'n':>5} " + " ".join(f"{name:>26}" for name in runs))
    for entity, (n, _) in recalls["tracelake"].items():
        print(f"  {entity:16} {n:5} " + " ".join(f"{recalls[name][entity][1]:26.3f}" for name in runs))
    report["recall"] = {name: {e: r for e, (_, r) in values.items()} for name, values in recalls.items()}

    args.out.mkdir(parents=True, exist_ok=True)
    name = f"results-{args.calls}calls-{args.mode}-ner-{'on' if ner else 'off'}.json"
    (args.out / name).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
