"""The residual-PII check (Great Expectations): passes on redacted tables,
fails when a raw value is planted past the redactor, and never reports a value."""

from __future__ import annotations

import copy
import json

import polars as pl
import pytest

from pipelines.redact.redactor import Redactor
from pipelines.redact.residual import patterns_for_mode, residual_pii_check
from pipelines.resources.warehouse import to_arrow
from tests.redact.conftest import KEYS

PLANTS = {
    "email": ("output_text", "write to joana.prado@provedor.com.br"),
    "cpf": ("error_message", "cpf 529.982.247-25 rejected"),
    "cnpj": ("system_text", "Fornecedor 11.222.333/0001-81"),
    "card": ("output_text", "card 5555 5555 5555 4444"),
    "api_key": ("extra_json", json.dumps({"debug": "key sk-ant-api03-" + "Zq9" * 30})),
}


def frame(rows: list[dict]) -> pl.DataFrame:
    """The way the asset check reads a table: through Arrow, nested columns and all."""
    return pl.from_arrow(to_arrow("calls", rows))


@pytest.fixture(scope="module")
def redacted_frame(redacted_rows) -> pl.DataFrame:
    return frame(redacted_rows.calls)


def test_redacted_calls_pass(redacted_frame, redacted_rows):
    report = residual_pii_check(redacted_frame, "calls")
    print("\n" + report.markdown())
    assert report.passed and report.rows == len(redacted_rows.calls)
    assert "request_json" in report.columns and "messages" in report.columns


def test_raw_calls_fail(corpus_rows):
    report = residual_pii_check(frame(corpus_rows[0]), "calls")
    assert not report.passed
    assert all(report.counts[p] > 0 for p in ("email", "cpf", "cnpj", "card", "api_key"))


@pytest.mark.parametrize("pattern", sorted(PLANTS))
def test_a_value_planted_past_the_redactor_fails_the_check(redacted_rows, pattern):
    rows = copy.deepcopy(redacted_rows.calls[:20])
    column, text = PLANTS[pattern]
    rows[7][column] = text
    report = residual_pii_check(frame(rows), "calls")
    assert not report.passed
    failed = {r.pattern: r for r in report.results if not r.passed}
    assert list(failed) == [pattern] and failed[pattern].rows == 1 and failed[pattern].matches == 1
    # counts only: the planted value is nowhere in what the check returns
    shown = report.markdown() + json.dumps([r.__dict__ for r in report.results]) + repr(report)
    assert text not in shown and text.split()[-1] not in shown


def test_a_value_in_a_nested_column_fails_too(redacted_rows):
    rows = copy.deepcopy(redacted_rows.calls[:5])
    rows[2]["messages"][0]["parts"][0]["text"] += " ligue 529.982.247-25"
    assert not residual_pii_check(frame(rows), "calls").passed


def test_what_the_redactor_leaves_on_purpose_does_not_fail(redacted_rows):
    rows = copy.deepcopy(redacted_rows.calls[:5])
    request = json.loads(rows[0]["request_json"])
    request["metadata"]["order_id"] = "52998224725"  # a string id that happens to pass the CPF check
    rows[0]["request_json"] = json.dumps(request)
    rows[1]["output_text"] = "docs: see support@example.com"  # reserved domain: never a person
    assert residual_pii_check(frame(rows), "calls").passed


def test_an_integer_cpf_under_an_id_key_is_residual_pii(redacted_rows):
    # issue 9: a CPF held as a JSON integer is one whatever its key (the redactor replaces it too)
    rows = copy.deepcopy(redacted_rows.calls[:5])
    request = json.loads(rows[0]["request_json"])
    request["metadata"]["tax_id"] = 52998224725
    rows[0]["request_json"] = json.dumps(request)
    report = residual_pii_check(frame(rows), "calls")
    assert not report.passed and report.counts["cpf"] == 1


def test_synthetic_tables_are_checked_for_what_synthetic_mode_cannot_write(corpus_rows):
    calls, spans = corpus_rows
    with Redactor(mode="synthetic", keys=KEYS, ner=False) as redactor:
        rows = redactor.redact_rows(calls[:40], spans[:40]).calls
    assert not residual_pii_check(frame(rows), "calls").passed  # fakes pass their check digits by design
    report = residual_pii_check(frame(rows), "calls", patterns=patterns_for_mode("synthetic"))
    assert report.passed and set(report.counts) == {"email", "api_key"}
