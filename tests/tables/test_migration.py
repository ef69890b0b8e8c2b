"""A warehouse written by tracelake before table layouts (layout 1, tests/fixtures) moves
to the current layout with `tracelake migrate`: every row and key kept, a second run
changes nothing, a run killed midway and run again ends equal to an uninterrupted one,
and until then every reader is told what to run instead of getting wrong answers."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest
from deltalake import DeltaTable

from pipelines.delta import OldLayout, layout_of
from pipelines.migration.rewrite import migrate
from pipelines.record.schema import LAYOUT, SPECS, TABLES
from pipelines.resources.warehouse import Warehouse
from tests.tables.conftest import TRACELAKE, demo_env

FIXTURE = Path(__file__).parents[1] / "fixtures" / "layout1_warehouse"
SIDE = ("rot_checks", "retention", "redaction_audit")


@pytest.fixture
def old(tmp_path) -> Warehouse:
    shutil.copytree(FIXTURE, tmp_path / "warehouse")
    return Warehouse(uri=str(tmp_path / "warehouse"))


def _sha(*parts: str) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def _files(warehouse: Warehouse, name: str) -> pl.DataFrame:
    """A table's rows as its files hold them, whatever its layout."""
    return pl.read_delta(warehouse.table_uri(name))


def expected(warehouse: Warehouse) -> dict[str, dict]:
    """What the layout-1 files say the tables hold, worked out here from the files alone."""
    calls, spans = _files(warehouse, "calls"), _files(warehouse, "spans")
    call_ids = {_sha(*r) for r in calls.select("source_format", "trace_id", "span_id").iter_rows()}
    stored_keys = {
        k if k is not None else _sha(f, t, s)
        for k, f, t, s in spans.select("span_key", "source_format", "trace_id", "span_id").iter_rows()
    }
    want = {
        "calls": {"rows": calls.height, "keys": call_ids},
        # every call's llm span is stored now; layout 1 stored only those that said more
        "spans": {"rows": len(stored_keys | call_ids), "keys": stored_keys | call_ids},
    }
    for name in TABLES:
        if name not in want and warehouse.table(name, any_layout=True) is not None:
            want[name] = {"rows": _files(warehouse, name).height}
    return want


def test_an_old_warehouse_is_refused_with_what_to_run(old, tmp_path):
    with pytest.raises(OldLayout, match="run `tracelake migrate`"):
        old.scan("calls")
    done = subprocess.run(
        [TRACELAKE, "sql", "SELECT count(*) FROM calls"],
        env={**demo_env(tmp_path), "TRACELAKE_WAREHOUSE": old.uri},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "tracelake migrate" in done.stdout + done.stderr


def test_migration_keeps_every_row_and_every_key(old):
    want = expected(old)
    report = migrate(old)
    assert set(report.rewritten) == set(want)
    for name, counts in want.items():
        table = old.table(name)  # readable again: the current layout
        assert layout_of(table, name) == LAYOUT
        stored = _files(old, name)
        assert stored.height == counts["rows"], name
        keys = list(SPECS[name].key)
        assert stored.select(keys).null_count().sum_horizontal().item() == 0, name
        assert not stored.select(keys).is_duplicated().any(), name
        if "keys" in counts:
            assert set(stored[keys[0]]) == counts["keys"], name
        assert (stored["record_sha256"].str.len_chars() == 64).all() if "record_sha256" in stored.columns else True
    calls = _files(old, "calls")
    for name in SIDE:
        rows = _files(old, name)
        assert rows["call_id"].drop_nulls().is_in(calls["call_id"].implode()).all(), name
        assert rows["trace_id"].null_count() == 0, name
    audit = _files(old, "redaction_audit")
    assert audit["span_key"].is_in(_files(old, "spans")["span_key"].implode()).all()
    of_spans = audit.filter(pl.col("source_table") == "spans")
    assert of_spans.height and of_spans["call_id"].null_count() == of_spans.height
    checks = _files(old, "rot_checks")
    assert checks["recorded_sha256"].null_count() == 0 and not (checks["rerendered_sha256"] == "").any()
    spans = _files(old, "spans")
    assert not (spans["call_id"] == "=").any()
    assert calls.filter(pl.col("request_json").is_not_null())["request_sha256"].null_count() == 0

    versions = {name: old.version(name) for name in want}
    again = migrate(old)
    assert again.rewritten == [] and {name: old.version(name) for name in want} == versions


def _layouts(uri: str) -> dict[str, int]:
    out = {}
    for name in TABLES:
        try:
            out[name] = layout_of(DeltaTable(f"{uri}/{name}"), name)
        except Exception:  # noqa: BLE001  (absent, or its log is being written)
            continue
    return out


def _contents(warehouse: Warehouse) -> dict[str, pl.DataFrame]:
    return {
        name: _files(warehouse, name).sort(list(SPECS[name].key))
        for name in TABLES
        if warehouse.table(name, any_layout=True) is not None
    }


def test_a_migration_killed_midway_ends_equal_when_run_again(tmp_path):
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    for folder in (clean, killed):
        shutil.copytree(FIXTURE, folder / "warehouse")
    migrate(Warehouse(uri=str(clean / "warehouse")))

    uri = str(killed / "warehouse")
    env = {**demo_env(killed), "TRACELAKE_WAREHOUSE": uri}
    for done_before_kill in (1, 4):
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        process = subprocess.Popen([TRACELAKE, "migrate"], env=env, start_new_session=True, **quiet)
        deadline = time.monotonic() + 120
        while sum(v == LAYOUT for v in _layouts(uri).values()) < done_before_kill and time.monotonic() < deadline:
            assert process.poll() is None, "the migration finished before it could be killed"
            time.sleep(0.02)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        layouts = _layouts(uri)
        assert LAYOUT in layouts.values() and 1 in layouts.values(), f"killed midway: {layouts}"

    finished = subprocess.run([TRACELAKE, "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "verified" in finished.stdout
    want, got = _contents(Warehouse(uri=str(clean / "warehouse"))), _contents(Warehouse(uri=uri))
    assert set(got) == set(want)
    for name, frame in want.items():
        assert got[name].equals(frame), name
