"""No PII at rest, anywhere (issue 9, section 2), through the real ingest job.

One object of frozen calls is written with PII where the redactor used to
miss it: a CPF, a phone and a card held as JSON integers under ``*_id`` keys,
an email as the user id, a phone as the session id, an email tag, a CPF as a
segment value, and an email in the ``service`` column (no redaction field: the
pre-write residual screen must quarantine that row by pointer). Then every
table, every file under the warehouse (``_delta_log`` included), every file of
the Dagster instance (its sqlite event log and run storage) and the captured
output are searched for the planted raw values.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, date, datetime
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from pipelines.record.schema import TABLES
from pipelines.redact import KeyRing, stored_id
from pipelines.retention.erasure import forget_user
from tests.environments import local_settings, run_stage

DAY = date(2026, 11, 20)
CPF_INT = 52998224725  # valid check digits
PHONE_INT = 5511987654321  # +55 11 98765-4321
CARD_INT = 4111111111111111  # Luhn-valid
USER_EMAIL = "joana.prado.fake@gmail.com"
SESSION_PHONE = "+55 11 97654-3210"
TAG_EMAIL = "vip.cliente.fake@gmail.com"
SEGMENT_CPF = "390.533.447-05"
SERVICE_EMAIL = "ops.leak.fake@gmail.com"
PLANTED = [str(CPF_INT), str(PHONE_INT), str(CARD_INT), USER_EMAIL, SESSION_PHONE, TAG_EMAIL, SEGMENT_CPF,
           "39053344705", SERVICE_EMAIL]  # fmt: skip


def frozen_call(n: int, **fields) -> dict:
    request = {
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 256,
        "system": "You answer billing questions.",
        "messages": [
            {"role": "user", "content": "Where is my refund?"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": f"toolu_{n}",
                        "name": "lookup_customer",
                        "input": {"tax_id": CPF_INT, "customer_id": PHONE_INT, "card_id": CARD_INT},
                    }
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "found"}]},
        ],
    }
    return {
        "format": "tracelake.frozen_call",
        "version": 1,
        "trace_id": f"trace-pii-{n}",
        "span_id": f"span-pii-{n}",
        "occurred_at": f"{DAY.isoformat()}T10:0{n}:00+00:00",
        "user_id": USER_EMAIL,
        "session_id": SESSION_PHONE,
        "tags": ["billing", TAG_EMAIL],
        "segment": {"user_tier": "pro", "account": SEGMENT_CPF},
        "service": "billing",
        "model": {"id": "claude-sonnet-4-5-20250929"},
        "request": request,
        "response": {"id": f"msg-pii-{n}", "content": [{"type": "text", "text": "Refund sent."}]},
        **fields,
    }


def write_source(root: Path) -> str:
    folder = root / "source" / f"{DAY:%Y/%m/%d}"
    folder.mkdir(parents=True)
    lines = [frozen_call(1), frozen_call(2), frozen_call(3, service=SERVICE_EMAIL)]
    (folder / "calls.jsonl").write_text("\n".join(json.dumps(d) for d in lines) + "\n")
    return f"{DAY:%Y/%m/%d}/calls.jsonl"


def files_text(root: Path) -> str:
    """Every file under ``root``, bytes decoded leniently (sqlite pages, Delta logs, parquet)."""
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pii")
    key = write_source(tmp)
    settings = local_settings(tmp)
    home = tmp / "dagster"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        result = run_stage(settings, "ingest", DAY.isoformat(), instance)
        yield settings, result, tmp, home, key


def test_the_day_ingests_and_the_leaking_row_is_quarantined_by_pointer(ingested):
    settings, result, _, _, key = ingested
    assert result.success
    warehouse = settings.warehouse()
    calls = warehouse.read("calls")
    assert sorted(calls["trace_id"]) == ["trace-pii-1", "trace-pii-2"]
    quarantine = warehouse.read("quarantine").filter(pl.col("error_class") == "residual_pii")
    # the call row, and its llm_call span with it: both by pointer
    assert sorted(zip(quarantine["source_key"], quarantine["line"], strict=True)) == [(key, 3), (key, 3)]
    messages = sorted(quarantine["message"])
    assert messages[0].startswith("a calls row from line 3 still matched the email pattern")
    assert "held back" in messages[1]
    assert not any(SERVICE_EMAIL in m or "ops.leak" in m for m in messages)
    log = warehouse.read("ingest_log").row(0, named=True)
    assert (log["records_read"], log["records_ingested"], log["records_quarantined"]) == (3, 2, 1)


def test_personal_ids_are_pseudonymized_consistently(ingested):
    settings, _, _, _, _ = ingested
    keys = KeyRing.from_env()
    calls = settings.warehouse().read("calls")
    assert set(calls["user_id"]) == {stored_id(USER_EMAIL, keys)}
    assert set(calls["session_id"]) == {stored_id(SESSION_PHONE, keys)}
    # the same person written another way maps to the same stored id
    assert stored_id(USER_EMAIL.upper(), keys) == stored_id(USER_EMAIL, keys)
    assert stored_id("5511976543210", keys) == stored_id(SESSION_PHONE, keys)
    tags = calls["tags"].to_list()[0]
    assert tags == ["billing", stored_id(TAG_EMAIL, keys)]
    segment = calls["segment"].to_list()[0]
    segment = segment if isinstance(segment, dict) else {item["key"]: item["value"] for item in segment}
    assert segment == {"user_tier": "pro", "account": stored_id(SEGMENT_CPF, keys)}
    traces = settings.warehouse().read("traces")
    assert set(traces["user_id"]) == {stored_id(USER_EMAIL, keys)}


def test_integers_under_id_keys_are_redacted(ingested):
    settings, _, _, _, _ = ingested
    request = json.loads(settings.warehouse().read("calls")["request_json"][0])
    tool_input = request["messages"][1]["content"][0]["input"]
    assert tool_input["tax_id"].startswith("<BR_CPF_")
    assert tool_input["customer_id"].startswith("<PHONE_NUMBER_")
    assert tool_input["card_id"].startswith("<CREDIT_CARD_")


def test_no_planted_value_in_any_table_file_or_dagster_storage(ingested):
    settings, _, tmp, home, _ = ingested
    warehouse = settings.warehouse()
    tables = [name for name in TABLES if warehouse.table(name) is not None]
    assert {"calls", "spans", "traces", "quarantine", "ingest_log", "redaction_audit"} <= set(tables)
    for name in tables:
        text = warehouse.read(name).write_ndjson()
        assert [v for v in PLANTED if v in text] == [], name
    logs = list((tmp / "warehouse").rglob("_delta_log/*.json"))
    assert logs
    assert [v for v in PLANTED if v in files_text(tmp / "warehouse")] == []
    storage = files_text(home)
    assert "raw_traces" in storage  # the event log is there, and searched
    assert [v for v in PLANTED if v in storage] == []


def test_no_planted_value_in_logs_or_metadata(ingested):
    _, result, _, _, _ = ingested
    records = result.all_events
    dumped = "\n".join(
        (e.message or "")
        + json.dumps(
            {k: str(v.value) for k, v in getattr(e.event_specific_data, "metadata", {}).items()}
            if hasattr(e.event_specific_data, "metadata")
            else {}
        )
        for e in records
    )
    assert "dagster/row_count" in dumped
    assert [v for v in PLANTED if v in dumped] == []


def test_captured_output_holds_no_planted_value(tmp_path, capsys, caplog):
    write_source(tmp_path)
    settings = local_settings(tmp_path)
    with caplog.at_level("DEBUG"), dg.instance_for_test() as instance:
        assert run_stage(settings, "ingest", DAY.isoformat(), instance).success
    captured = capsys.readouterr()
    text = captured.out + captured.err + caplog.text
    assert "redaction (placeholder)" in text
    assert [v for v in PLANTED if v in text] == []


def test_forget_with_the_raw_email_erases_the_pseudonymized_user(ingested, tmp_path):
    import shutil

    settings, _, tmp, _, _ = ingested
    copy = tmp_path / "warehouse"
    shutil.copytree(tmp / "warehouse", copy)
    warehouse = dataclasses.replace(settings.warehouse(), uri=str(copy))
    assert warehouse.read("calls").height == 2
    report = forget_user(
        warehouse, USER_EMAIL, key=b"erasure-key-0123456789abcdef", requested_by="ticket-42", now=datetime.now(UTC)
    )
    assert report.rows_deleted["calls"] == 2 and report.rows_remaining == 0
    assert warehouse.read("calls").height == 0 and warehouse.read("traces").height == 0
