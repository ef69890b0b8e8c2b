"""The demo's nightly run: generate a day of demo traces with the stores they were
rendered from (aged the way life ages them), ingest with the ingest job, run the
rot check, and compare every call's verdict with what the demo changed."""

from __future__ import annotations

import json
from datetime import date

import dagster as dg
import duckdb
import polars as pl
import pytest

from assets.rot import rot_checks, rot_rate_jump
from pipelines.demo import generate
from pipelines.demo import stores as demo
from pipelines.rot.table import LATEST_STATUS_SQL, ROTTED_BY_COMPONENT_SQL, latest_status
from tests.environments import local_settings, run_stage, s3_settings

DAY = date(2026, 11, 20)  # the agent alias moves the day after: before any day these tests run


def expected_verdict(call: dict) -> tuple[str, list[str], list[str]]:
    """(status, components, missing) the demo's changes imply for a call, from its record alone."""
    if call["template_version"] is None:
        return "unverifiable", [], ["template_version"]
    if call["request_sha256"] != call["rendered_request_sha256"]:
        return "unverifiable", [], ["request_matching_hash"]
    if call["service"] == "support.triage":
        return "impure", [], []  # its template prints today's date
    components = []
    if call["service"] == "agent.orders":
        components.append("model_alias_moved")
    if call["template_id"] == demo.SUPPORT_TEMPLATE:
        doc_ids = [d["doc_id"] for d in call["retrieval"]["documents"]]
        if call["template_version"] == demo.EDITED_VERSION:
            components.append("template_changed")
        if demo.CHANGED_DOC in doc_ids:
            components.append("document_changed")
        if demo.DELETED_DOC in doc_ids:
            components.append("document_missing")
    return ("rotted" if components else "verified"), components, []


def _materialize_rot(settings, instance):
    result = dg.materialize(
        [rot_checks, rot_rate_jump],
        resources=settings.resources(),
        partition_key=DAY.isoformat(),
        instance=instance,
    )
    assert result.success
    return result


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_nightly_rot_statuses_match_what_the_demo_changed(kind, tmp_path, request, instance):
    settings = local_settings(tmp_path) if kind == "local" else s3_settings(request.getfixturevalue("s3"))
    generate(
        settings.source_uri,
        calls=260,
        days=1,
        seed=11,
        end=DAY,
        stores_out=settings.stores_uri,
        endpoint_url=settings.endpoint_url,
    )
    assert run_stage(settings, "ingest", DAY.isoformat(), instance).success
    first = _materialize_rot(settings, instance)

    warehouse = settings.warehouse()
    calls = warehouse.read("calls").to_dicts()
    checks = warehouse.read("rot_checks")
    assert checks.height == len(calls)
    by_call = {r["call_id"]: r for r in checks.to_dicts()}
    mismatches = []
    for call in calls:
        got = by_call[call["call_id"]]
        want = expected_verdict(call)
        if (got["status"], got["components"], got["missing"]) != want:
            mismatches.append((call["service"], call["template_version"], want, got["status"], got["components"]))
    assert not mismatches, mismatches[:5]
    statuses = set(checks["status"])
    assert statuses == {"verified", "rotted", "impure", "unverifiable"}
    components = {c for cs in checks["components"] for c in cs}
    assert components == {"template_changed", "document_changed", "document_missing", "model_alias_moved"}
    # replays can be exact wherever the recorded bytes are the ones the hash witnessed
    exact = checks.filter(pl.col("replay_fidelity") == "exact")
    retained = [
        c for c in calls if c["request_sha256"] == c["rendered_request_sha256"] and "redacted" not in (c["flags"] or [])
    ]
    assert exact.height == len(retained)
    assert set(checks["index_snapshot"]) == {demo.KB_REBUILT}
    assert set(checks.filter(pl.col("model_alias") == demo.AGENT_ALIAS)["model_snapshot"]) == {demo.SONNET_NEXT}

    meta = first.asset_materializations_for_node("rot_checks")[0].metadata
    assert meta["calls_checked"].value == len(calls)
    assert meta["calls_rotted"].value == checks.filter(pl.col("status") == "rotted").height
    check_eval = first.get_asset_check_evaluations()[0]
    assert check_eval.passed, "one day has no history to jump from"

    # Every run adds a row per call; unchanged stores give the same verdicts again.
    _materialize_rot(settings, instance)
    checks = warehouse.read("rot_checks")
    assert checks.height == 2 * len(calls)
    runs = checks.group_by("call_id").agg(pl.col("status").n_unique().alias("n"), pl.len().alias("rows"))
    assert runs["n"].max() == 1 and runs["rows"].min() == 2
    latest = latest_status(warehouse.scan("rot_checks")).collect()
    assert latest.height == len(calls)
    assert latest["checked_at"].min() == checks["checked_at"].max()

    # The README's queries run on the table as it is.
    ctx = pl.SQLContext(rot_checks=warehouse.scan("rot_checks"))
    assert ctx.execute(LATEST_STATUS_SQL).collect().height == len(calls)
    by_component = ctx.execute(ROTTED_BY_COMPONENT_SQL).collect()
    expected = {}
    for call in calls:
        status, comps, _ = expected_verdict(call)
        for c in comps if status == "rotted" else []:
            expected[(c, call["service"])] = expected.get((c, call["service"]), 0) + 1
    assert {(r["component"], r["service"]): r["calls"] for r in by_component.to_dicts()} == expected
    con = duckdb.connect()
    con.register("rot_checks", warehouse.read("rot_checks").to_arrow())
    in_duckdb = con.sql(ROTTED_BY_COMPONENT_SQL).pl()
    assert {(r["component"], r["service"]): r["calls"] for r in in_duckdb.to_dicts()} == expected
    assert json.dumps(meta["components"].value)  # metadata is plain JSON
