"""Feedback is never doubled by reading an object again: not after an ingest
killed (SIGKILL, a real process) right after its `calls` and `spans` commits,
and not by re-deliveries of the same objects. Each is repeated five times and
every time the tables equal one clean run's: the same keys, the same row counts,
the same feedback items on every call.

The feedback carries PII in its comments, which redaction rewrites before
anything is stored: a stored item must be recognized by an identity that
redaction leaves alone, not by its text."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from pipelines.demo import generate
from pipelines.formats.assembly import add_feedback, with_feedback_ids
from pipelines.record.schema import KEYS
from tests.environments import local_settings, run_stage
from tests.ingest.shard_run import settings_file

DAY = date(2026, 11, 29)
ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 5
TABLES = ("calls", "spans", "traces", "redaction_audit")

# The ingest job in a process of its own, killed -9 by itself the moment its `spans`
# merge has committed (after `calls`, before `redaction_audit`, `quarantine` and `ingest_log`).
KILLED_INGEST = """
import json, os, signal, sys
import dagster as dg
from pipelines.definitions import build
from pipelines.resources.warehouse import Warehouse
from pipelines.settings import Settings

merge = Warehouse.merge

def merge_then_die(self, name, *args, **kwargs):
    result = merge(self, name, *args, **kwargs)
    if name == "spans":
        os.kill(os.getpid(), signal.SIGKILL)
    return result

Warehouse.merge = merge_then_die
settings = Settings(**json.loads(open(sys.argv[1]).read()))
job = build(settings).resolve_job_def("load")
job.execute_in_process(partition_key=sys.argv[2] + "|all", instance=dg.DagsterInstance.ephemeral())
raise SystemExit("the ingest finished: it was never killed")
"""


def _feedback_doc(n: int) -> dict:
    """A frozen call whose feedback comments carry an email and a phone (redaction rewrites both)."""
    return {
        "format": "tracelake.frozen_call",
        "trace_id": f"fb-{n}",
        "span_id": f"s-{n}",
        "occurred_at": f"2026-11-29T10:{n:02d}:00Z",
        "model": {"id": "claude-haiku-4-5"},
        "request": {
            "model": "claude-haiku-4-5",
            "max_tokens": 50,
            "messages": [{"role": "user", "content": "where is my order?"}],
        },
        "output_text": "it ships tomorrow",
        "feedback": [
            {
                "source": "user",
                "name": "thumbs",
                "value": "down",
                "comment": f"Still wrong. Write to ana.souza{n}@example.com or call +55 11 98765-43{n:02d}",
                "at": f"2026-11-29T10:{n:02d}:30Z",
            },
            {"source": "user", "name": "csat", "value": 2, "comment": f"Maria Oliveira, order {n}"},
            {"source": "user", "name": "thumbs", "value": "up"},
        ],
    }


def _source(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    generate(str(source), calls=40, days=1, seed=5, end=DAY, stores_out=str(tmp_path / "stores"))
    folder = source / "2026" / "11" / "29"
    (folder / "feedback.jsonl").write_text("\n".join(json.dumps(_feedback_doc(n)) for n in range(12)))
    return source


def _redeliver(source: Path, round_: int) -> None:
    """The same bytes delivered again: every object gets a new version (etag) and no new content."""
    for path in source.rglob("*"):
        if path.is_file():
            stat = path.stat()
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + (round_ + 1) * 1_000_000_000))


def _state(warehouse) -> dict:
    """Keys and counts of the tables ingest writes, and every call's feedback items."""
    state: dict = {}
    for table in TABLES:
        frame = warehouse.read(table)
        state[table] = (frame.height, sorted(frame[KEYS[table][0]].to_list()))
    calls = warehouse.read("calls").select("call_id", "feedback")
    state["feedback"] = {
        call_id: sorted(json.dumps(item, sort_keys=True, default=str) for item in items)
        for call_id, items in calls.iter_rows()
        if items
    }
    state["feedback_items"] = sum(len(items) for items in state["feedback"].values())
    state["objects"] = warehouse.read("ingest_log")["source_key"].n_unique()
    return state


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> dict:
    """One ingest of the day into an empty warehouse: what every test below must end equal to."""
    tmp = tmp_path_factory.mktemp("clean")
    _source(tmp)
    settings = local_settings(tmp)
    assert run_stage(settings, "ingest", DAY.isoformat()).success
    state = _state(settings.warehouse())
    # the fixture is what it claims: PII-bearing feedback on the planted calls, redacted at rest
    planted = [items for items in state["feedback"].values() if any('"csat"' in i for i in items)]
    assert len(planted) == 12 and all(len(items) == 3 for items in planted)
    assert not any("ana.souza" in i or "98765" in i for items in planted for i in items)
    return state


def _kill_after_calls_and_spans(settings, tmp_path: Path) -> None:
    warehouse = settings.warehouse()
    logged = warehouse.read("ingest_log").height if warehouse.version("ingest_log") is not None else 0
    process = subprocess.run(
        [sys.executable, "-c", KILLED_INGEST, settings_file(settings, tmp_path / "settings.json"), DAY.isoformat()],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert process.returncode == -signal.SIGKILL, process.stderr[-3000:]
    # killed where intended: calls and spans merged (a first run commits them), the objects not marked done
    assert warehouse.version("calls") is not None and warehouse.version("spans") is not None
    assert (warehouse.read("ingest_log").height if warehouse.version("ingest_log") is not None else 0) == logged


def test_an_ingest_killed_after_its_calls_and_spans_commits_doubles_nothing(clean, tmp_path):
    source = _source(tmp_path)
    settings = local_settings(tmp_path)
    for round_ in range(ROUNDS):
        if round_:
            _redeliver(source, round_)  # else the objects are logged as done and nothing is read again
        _kill_after_calls_and_spans(settings, tmp_path)
        assert run_stage(settings, "ingest", DAY.isoformat()).success
        assert _state(settings.warehouse()) == clean, f"round {round_ + 1}"


def test_redelivered_objects_double_nothing(clean, tmp_path):
    source = _source(tmp_path)
    settings = local_settings(tmp_path)
    assert run_stage(settings, "ingest", DAY.isoformat()).success
    assert _state(settings.warehouse()) == clean
    for round_ in range(ROUNDS):
        _redeliver(source, round_)
        assert run_stage(settings, "ingest", DAY.isoformat()).success
        assert _state(settings.warehouse()) == clean, f"re-delivery {round_ + 1}"


def test_rows_stored_before_feedback_had_an_identity_heal_instead_of_doubling():
    """A call stored by an earlier version (its feedback without ids, and already doubled by
    the old carry-over) gains nothing from its fresh parse, and the doubles are gone."""
    fresh_item = {"source": "user", "name": "thumbs", "value_string": "down", "comment": "call 555-0100"}
    fresh = {"call_id": "c", "feedback": with_feedback_ids("c", [{**fresh_item, "id": None}])}
    stored_item = {**fresh_item, "comment": "call <PHONE_NUMBER>", "id": None}
    assert add_feedback(fresh, [stored_item, dict(stored_item), dict(stored_item)]) is False
    assert len(fresh["feedback"]) == 1
