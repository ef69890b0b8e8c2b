"""Erasure: no row and no file (data, log or checkpoint) keeps the user's data
afterwards, other users' rows stay, and the audit row holds no personal data."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.demo import generate
from pipelines.record.schema import TABLES
from pipelines.retention.erasure import ErasureError, forget_user
from tests.environments import run_stage, s3_settings
from tests.retention.environment import DAYS, ingest, settings_for
from tests.retention.planted import ERASED, ERASED_EMAIL, ERASED_USER, files_holding, write_planted
from tests.retention.test_sweep import decide_days

KEY = b"0123456789abcdef0123456789abcdef"
NOW = datetime(2026, 12, 1, 9, tzinfo=UTC)
# Email, name and phone were redacted at ingest (no table ever held them); what
# ties rows to the user is the user id and the ids of their traces.
PERSONAL = (ERASED_USER,)


def _rows_of_user(warehouse, trace_ids) -> dict[str, int]:
    counts = {}
    for name, schema in TABLES.items():
        conditions = []
        if "user_id" in schema.names:
            conditions.append(pl.col("user_id") == ERASED_USER)
        if "trace_id" in schema.names:
            conditions.append(pl.col("trace_id").is_in(sorted(trace_ids)))
        if conditions:
            counts[name] = warehouse.scan(name).filter(pl.any_horizontal(conditions)).select(pl.len()).collect().item()
    return counts


def test_forget_leaves_no_row_and_no_file_with_the_user(warehouse, demo):
    root = Path(warehouse.uri)
    decide_days(warehouse)
    traces = set(demo.planted.erased_traces)
    before = _rows_of_user(warehouse, traces)
    assert before["calls"] >= 5 and before["spans"] > before["calls"] and before["traces"] == 4
    assert before["retention"] == before["calls"]
    needles = (*PERSONAL, *traces)
    for needle in needles:
        assert files_holding(root, needle), needle  # the detector sees the user before
    for raw in (ERASED_EMAIL, ERASED.phone):
        assert files_holding(root, raw) == [], "redaction at ingest kept it out of every file"
    totals = {name: warehouse.scan(name).select(pl.len()).collect().item() for name in ("calls", "spans", "traces")}

    report = forget_user(warehouse, ERASED_USER, key=KEY, requested_by="DSR-2026-0042", now=NOW)

    # the counts are the rows each table lost, as any reader counts them
    assert report.rows_deleted == {name: n for name, n in before.items() if n}
    assert report.rows_remaining == 0 and report.files_removed > 0
    assert all(n == 0 for n in _rows_of_user(warehouse, traces).values())
    for name, total in totals.items():
        assert warehouse.scan(name).select(pl.len()).collect().item() == total - before[name]
    for needle in needles:
        assert files_holding(root, needle) == [], needle
    log = warehouse.read("erasure_log").to_dicts()
    assert len(log) == 1
    assert log[0]["subject_hash"] == hmac.new(KEY, ERASED_USER.encode(), hashlib.sha256).hexdigest()
    assert log[0]["requested_by"] == "DSR-2026-0042" and log[0]["requested_at"] == NOW
    assert {r["table"]: r["rows"] for r in log[0]["rows_deleted"]} == report.rows_deleted
    assert log[0]["total_rows_deleted"] == sum(report.rows_deleted.values())


def test_forget_refuses_a_weak_key_or_a_request_naming_the_user(warehouse):
    with pytest.raises(ErasureError, match="at least 16 bytes") as weak:
        forget_user(warehouse, ERASED_USER, key=b"short", requested_by="DSR-1", now=NOW)
    with pytest.raises(ErasureError, match="must not contain the user id") as named:
        forget_user(warehouse, ERASED_USER, key=KEY, requested_by=f"asked by {ERASED_USER}", now=NOW)
    assert ERASED_USER not in str(weak.value) + str(named.value)
    assert warehouse.read("calls", pl.col("user_id") == ERASED_USER).height > 0  # nothing was touched


def test_the_forget_command_erases_and_never_prints_the_user(warehouse, tmp_path, monkeypatch):
    key_file = tmp_path / "erasure.key"
    key_file.write_bytes(KEY + b"\n")
    monkeypatch.setenv("TRACELAKE_WAREHOUSE", warehouse.uri)
    args = ["forget", "--user-id", ERASED_USER, "--requested-by", "DSR-7", "--key-file", str(key_file), "--yes"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "calls" in result.output and "rows deleted" in result.output
    assert ERASED_USER not in result.output
    assert warehouse.read("calls", pl.col("user_id") == ERASED_USER).height == 0
    missing = CliRunner().invoke(app, [*args[:5], "--key-file", str(tmp_path / "nope"), "--yes"])
    assert missing.exit_code != 0 and "cannot read the erasure key file" in missing.output


def test_forget_on_s3_leaves_no_object_with_the_user(s3, tmp_path):
    day = DAYS[1]
    source = str(tmp_path / "source")
    generate(source, calls=60, days=1, seed=5, end=day)
    write_planted(source, day)
    warehouse = s3.warehouse()
    ingest(s3_settings(s3, source_uri=source, warehouse_uri=warehouse.uri), [day])
    assert files_holding(s3.download("wh/", tmp_path / "before"), ERASED_USER)

    report = forget_user(warehouse, ERASED_USER, key=KEY, requested_by="DSR-9", now=NOW)

    assert report.rows_deleted["calls"] >= 5 and report.rows_remaining == 0
    mirror = s3.download("wh/", tmp_path / "after")
    for needle in PERSONAL:
        assert files_holding(mirror, needle) == [], needle
    assert warehouse.read("erasure_log").height == 1
    assert warehouse.read("calls").height > 40  # everyone else is still there


def test_forget_reaches_every_table_that_names_the_users_calls_and_nothing_in_dagster_holds_them(tmp_path):
    """`ablations` names calls by bad_call_id / good_call_id: erasure follows every column that
    references a call. The stages' materializations (Dagster's event storage, which erasure
    cannot rewrite) never held the user's ids in the first place."""
    day = DAYS[1]
    source, warehouse_uri = str(tmp_path / "source"), str(tmp_path / "warehouse")
    stores = str(tmp_path / "stores")
    generate(source, calls=80, days=1, seed=6, end=day, stores_out=stores)
    planted = write_planted(source, day)
    settings = settings_for(source, warehouse_uri, stores_uri=stores)
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        for stage in ("ingest", "retention", "rot"):
            assert run_stage(settings, stage, day.isoformat(), instance).success
    warehouse = settings.warehouse()
    theirs = warehouse.read("calls", pl.col("user_id") == ERASED_USER)["call_id"].to_list()
    others = warehouse.read("calls", pl.col("user_id") != ERASED_USER)["call_id"].to_list()
    warehouse.merge(
        "ablations",
        [
            {"ablation_id": "a1", "bad_call_id": theirs[0], "good_call_id": others[0], "record_sha256": "1"},
            {"ablation_id": "a2", "bad_call_id": others[1], "good_call_id": theirs[1], "record_sha256": "2"},
            {"ablation_id": "a3", "bad_call_id": others[2], "good_call_id": others[3], "record_sha256": "3"},
        ],
    )
    counted = _rows_of_user(warehouse, set(planted.erased_traces))

    report = forget_user(warehouse, ERASED_USER, key=KEY, requested_by="DSR-11", now=NOW)

    assert report.rows_deleted["ablations"] == 2 and warehouse.read("ablations")["ablation_id"].to_list() == ["a3"]
    for name, n in counted.items():
        assert report.rows_deleted.get(name, 0) == n, name  # each count is the rows that table lost
    for needle in (ERASED_USER, *planted.erased_traces, *theirs):
        assert files_holding(tmp_path / "warehouse", needle) == [], needle
    # nobody's ids: Dagster's storage (runs, events, metadata) holds no user, trace, session or call id
    stored = b"".join(p.read_bytes() for p in (tmp_path / "dagster").rglob("*") if p.is_file())
    ids = warehouse.read("calls").select("user_id", "trace_id", "session_id", "call_id")
    for value in {v for column in ids.iter_columns() for v in column.drop_nulls().to_list()}:
        assert value.encode() not in stored, f"Dagster's storage holds {value}"
