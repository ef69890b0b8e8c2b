"""Identity keys (issue 33): a value under a key the policy names as an identity document
(``fields.identity``: ``tax_id``, ``cpf``, ``ssn``, ``document``...) is redacted whatever its
form, and the residual screen flags one left there.

A planted corpus of 100 of each kind the pattern recognizers cannot see: CPFs held as JSON
integers that lost their leading zeros, CPFs with invalid check digits, SSNs held as JSON
integers. Recall must be 1.000 per kind, through ``tracelake redact`` and through the real
ingest job; the residual scan flags every one of them in the raw rows.
"""

from __future__ import annotations

import json
import random
from datetime import date
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.redact import check_digits
from pipelines.redact.policy import load_policy
from pipelines.redact.residual import patterns_for_mode, scan
from pipelines.resources.warehouse import to_arrow
from tests.environments import local_settings, run_stage
from tests.redact.conftest import rows_of
from tests.redact.test_commands import ENV

DAY = date(2026, 11, 20)
PER_KIND = 100
CPF_KEYS = ("tax_id", "cpf", "documento", "taxpayer_id", "document")
SSN_KEYS = ("ssn", "social_security_number", "tax_id")


def _cpfs_without_leading_zeros(rng: random.Random, n: int) -> list[int]:
    """Valid CPFs starting with one to three zeros, as the integers a JSON writer keeps."""
    out: set[int] = set()
    while len(out) < n:
        zeros = rng.randint(1, 3)
        base = "0" * zeros + "".join(str(rng.randint(0, 9)) for _ in range(9 - zeros))
        cpf = base + check_digits.cpf_check_digits(base)
        if not check_digits.is_valid_cpf(cpf) or len(str(int(cpf))) < 8:
            continue
        out.add(int(cpf))
    return sorted(out)


def _cpfs_with_bad_check_digits(rng: random.Random, n: int) -> list[str]:
    out: set[str] = set()
    while len(out) < n:
        base = "".join(str(rng.randint(0, 9)) for _ in range(9))
        good = check_digits.cpf_check_digits(base)
        bad = f"{(int(good) + rng.randint(1, 98)) % 100:02d}"
        out.add(f"{base[:3]}.{base[3:6]}.{base[6:]}-{bad}")
    return sorted(out)


def _ssns(rng: random.Random, n: int) -> list[int]:
    return sorted({rng.randint(100_000_000, 899_999_999) for _ in range(n * 2)})[:n]


def planted() -> dict[str, list[tuple[str, int | str]]]:
    """kind -> (key, value) planted, PER_KIND each."""
    rng = random.Random(33)
    return {
        "cpf integer without leading zeros": [
            (CPF_KEYS[i % len(CPF_KEYS)], v) for i, v in enumerate(_cpfs_without_leading_zeros(rng, PER_KIND))
        ],
        "cpf without valid check digits": [
            (CPF_KEYS[i % len(CPF_KEYS)], v) for i, v in enumerate(_cpfs_with_bad_check_digits(rng, PER_KIND))
        ],
        "ssn integer": [(SSN_KEYS[i % len(SSN_KEYS)], v) for i, v in enumerate(_ssns(rng, PER_KIND))],
    }


def documents(plants: dict[str, list[tuple[str, int | str]]]) -> list[dict]:
    """One frozen call per planted value: in tool arguments (a dict) and, as JSON text, in the tool result."""
    docs = []
    for kind, values in plants.items():
        for n, (key, value) in enumerate(values):
            call = f"{kind.split()[0]}-{len(docs)}"
            docs.append(
                {
                    "format": "tracelake.frozen_call",
                    "version": 1,
                    "trace_id": f"trace-{call}",
                    "span_id": f"span-{call}",
                    "occurred_at": f"{DAY.isoformat()}T10:{n % 60:02d}:00+00:00",
                    "model": {"id": "claude-sonnet-4-5-20250929"},
                    "request": {
                        "model": "claude-sonnet-4-5-20250929",
                        "max_tokens": 128,
                        "messages": [
                            {"role": "user", "content": "Confere meu cadastro, por favor."},
                            {
                                "role": "assistant",
                                "content": [
                                    {"type": "tool_use", "id": "toolu_1", "name": "cadastro", "input": {key: value}}
                                ],
                            },
                            {
                                "role": "user",
                                "content": [
                                    {
                                        "type": "tool_result",
                                        "tool_use_id": "toolu_1",
                                        "content": json.dumps({"cliente": {key: value, "status": "ativo"}}),
                                    }
                                ],
                            },
                        ],
                    },
                    "response": {"id": f"msg-{call}", "content": [{"type": "text", "text": "Cadastro conferido."}]},
                }
            )
    return docs


def recall(plants: dict[str, list[tuple[str, int | str]]], text: str) -> dict[str, float]:
    """Per kind, the share of planted values that appear nowhere in ``text`` (digits compared too)."""
    digits_only = "".join(c if c.isdigit() else " " for c in text).split()
    found_digits = set(digits_only)
    out = {}
    for kind, values in plants.items():
        gone = 0
        for _, value in values:
            raw = str(value)
            digits = "".join(c for c in raw if c.isdigit())
            if raw not in text and digits not in found_digits and digits.zfill(11) not in found_digits:
                gone += 1
        out[kind] = gone / len(values)
    return out


PLANTS = planted()
PERFECT = dict.fromkeys(PLANTS, 1.0)


def test_the_corpus_is_what_it_says():
    assert {kind: len(values) for kind, values in PLANTS.items()} == dict.fromkeys(PLANTS, PER_KIND)
    assert all(isinstance(v, int) and len(str(v)) < 11 for _, v in PLANTS["cpf integer without leading zeros"])
    assert not any(check_digits.is_valid_cpf(v) for _, v in PLANTS["cpf without valid check digits"])
    text = json.dumps(documents(PLANTS))
    assert recall(PLANTS, text) == dict.fromkeys(PLANTS, 0.0)  # the measure sees every raw value


def test_tracelake_redact_removes_every_identity_value():
    text = "".join(json.dumps(d) + "\n" for d in documents(PLANTS))
    result = CliRunner().invoke(app, ["redact", "-"], input=text, env=ENV)
    assert result.exit_code == 0, result.output
    assert recall(PLANTS, result.stdout) == PERFECT
    out = [json.loads(line) for line in result.stdout.splitlines()]
    tool_input = out[0]["request"]["messages"][1]["content"][0]["input"]
    assert tool_input == {"tax_id": "<BR_CPF_1>"}  # an integer that lost its zeros is still a CPF


def test_the_residual_scan_flags_every_identity_value_left_in_place():
    calls, _ = rows_of(documents(PLANTS))
    found = scan(to_arrow("calls", calls), "calls", load_policy())
    assert len(found) == len(calls) == 3 * PER_KIND
    assert all(counts["identity"] >= 1 for counts in found.values())
    # synthetic mode writes digits there on purpose: not a residual there
    synthetic = scan(to_arrow("calls", calls), "calls", load_policy(), patterns_for_mode("synthetic"))
    assert not synthetic


def test_ingest_removes_every_identity_value(tmp_path: Path):
    folder = tmp_path / "source" / f"{DAY:%Y/%m/%d}"
    folder.mkdir(parents=True)
    (folder / "calls.jsonl").write_text("".join(json.dumps(d) + "\n" for d in documents(PLANTS)))
    settings = local_settings(tmp_path)
    assert run_stage(settings, "ingest", DAY.isoformat()).success
    warehouse = settings.warehouse()
    calls = warehouse.read("calls")
    assert calls.height == 3 * PER_KIND  # redacted, not held back by the residual screen
    assert warehouse.read("quarantine").filter(pl.col("error_class") == "residual_pii").height == 0
    text = calls.write_ndjson() + warehouse.read("spans").write_ndjson()
    assert recall(PLANTS, text) == PERFECT


@pytest.mark.parametrize("value", ["a summary of the contract, version 2 of 3, signed in 2025" * 2, "n/a"])
def test_text_under_an_identity_key_that_is_no_identity_value_is_read_as_text(value):
    from pipelines.redact.field_rules import FieldRules, whole_entity

    info = FieldRules(load_policy()).info("request_json.document")
    assert info.identity == "BR_CPF"
    assert whole_entity(info, value) is None
    assert whole_entity(info, "12") == "BR_CPF"
