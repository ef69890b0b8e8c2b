"""The residual-PII scan: passes on redacted tables, fails when a raw value is planted
past the redactor, never reports a value; every pattern form, in every column of `calls`,
`spans` and `quarantine`, plain, inside JSON text, behind JSON and \\u escapes, in other
scripts' digits, is counted, and clean rows are not."""

from __future__ import annotations

import copy
import json

import polars as pl
import pytest

from pipelines.redact import check_digits
from pipelines.redact.policy import load_policy
from pipelines.redact.redactor import Redactor
from pipelines.redact.residual import patterns_for_mode, residual_pii_check, scan
from pipelines.redact.row_fields import FIELDS, JSON, TEXT
from pipelines.resources.warehouse import to_arrow
from tests.redact.conftest import KEYS

PLANTS = {
    "email": ("output_text", "write to joana.prado@provedor.com.br"),
    "cpf": ("error_message", "cpf 529.982.247-25 rejected"),
    "cnpj": ("system_text", "Fornecedor 11.222.333/0001-81"),
    "card": ("output_text", "card 5555 5555 5555 4444"),
    "api_key": ("extra_json", json.dumps({"debug": "key sk-ant-api03-" + "Zq9" * 30})),
}


def frame(rows: list[dict], table: str = "calls") -> pl.DataFrame:
    """The way the asset check reads a table: through Arrow, nested columns and all."""
    return pl.from_arrow(to_arrow(table, rows))


@pytest.fixture(scope="module")
def redacted_frame(redacted_rows) -> pl.DataFrame:
    return frame(redacted_rows.calls)


def test_redacted_calls_pass(redacted_frame, redacted_rows):
    report = residual_pii_check(redacted_frame, "calls")
    print("\n" + report.markdown())
    assert report.passed and report.rows == len(redacted_rows.calls)
    assert {"request_json", "messages", "service", "block_hashes"} <= set(report.columns)


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
    rows[2]["provider_request_id"] = "52998224725"  # a bare digit run in an identifier column
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


# -- the gate against walking every cell ------------------------------------------


def _alnum_cnpj() -> str:
    base = "12ABC34501DE"
    full = base + check_digits.cnpj_check_digits(base)
    return f"{full[:2]}.{full[2:5]}.{full[5:8]}/{full[8:12]}-{full[12:]}"


ARABIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
FULLWIDTH = str.maketrans("0123456789", "０１２３４５６７８９")

# One value of every form the scan counts (each counted once by the full walk)
FORMS = {
    "email": "joana.prado@provedor.com.br",
    "cpf formatted": "529.982.247-25",
    "cpf plain": "52998224725",
    "cpf arabic digits": "529.982.247-25".translate(ARABIC),
    "cpf fullwidth digits": "52998224725".translate(FULLWIDTH),
    "cnpj formatted": "11.222.333/0001-81",
    "cnpj plain": "11222333000181",
    "cnpj alphanumeric": _alnum_cnpj(),
    "card spaced": "5555 5555 5555 4444",
    "card dashed": "4111-1111-1111-1111",
    "card plain": "4111111111111111",
    "card amex": "3782 822463 10005",
    "card arabic digits": "4111111111111111".translate(ARABIC),
    "anthropic key": "sk-ant-api03-" + "Zq9x" * 8,
    "openai key": "sk-proj-" + "Ab3d" * 8,
    "aws key": "AKIA" + "Z2Q4W6E8R0T1Y3U5",
    "github token": "ghp_" + "a1B2" * 9,
    "github pat": "github_pat_" + "a1B2c" * 13,
    "slack token": "xoxb-123456789012-abcdefghij",
    "google key": "AIza" + "Sy" + "B1c2D3e4F5g6H7i8J9k0L1m2N3o4P5q6R",
    "stripe key": "rk_live_" + "a1B2" * 5,
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl",
    "private key": "-----BEGIN RSA PRIVATE KEY-----\n" + "MIIEv" * 8 + "\n-----END RSA PRIVATE KEY-----",
}
# numbers held as JSON integers (the walk checks them as numbers)
NUMBERS = {"cpf integer": 52998224725, "card integer": 4111111111111111, "card negative": -4111111111111111}
# formatted forms: what counts in an identifier, where a bare digit run does not
IDENTIFIER_FORMS = {k: v for k, v in FORMS.items() if "plain" not in k and "digits" not in k}


def _escaped_everywhere(text: str) -> str:
    """Every character as a \\u escape: JSON text that shows nothing of the value."""
    return "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else json.dumps(c)[1:-1] for c in text)


def json_texts(value: str) -> dict[str, str]:
    """JSON texts holding ``value`` as a string leaf, escaped in each way JSON allows."""
    return {
        "json": json.dumps({"note": f"veja {value} ok"}, ensure_ascii=False),
        "json after a line break": json.dumps({"note": f"linha 1\n{value}\tfim"}, ensure_ascii=False),
        "json quoted": json.dumps({"note": f'ele disse "{value}"'}, ensure_ascii=False),
        "json ascii escapes": json.dumps({"note": f"José: {value}"}, ensure_ascii=True),
        "json escaped slashes": json.dumps({"note": value}).replace("/", "\\/"),
        "json all unicode escapes": '{"note": "' + _escaped_everywhere(value) + '"}',
        "json in json": json.dumps({"inner": json.dumps({"nota": f"b\n{value}"})}),
        "json in json in json": json.dumps({"a": json.dumps({"b": json.dumps({"c": f"x\n{value}\\y"})})}),
        "json in a list": json.dumps([{"k": "v"}, [f"{value}"]], ensure_ascii=False),
    }


def text_forms(value: str) -> dict[str, str]:
    """Free-text values holding ``value``: plain, across lines, and text that is JSON."""
    return {
        "text": f"por favor {value} obrigado",
        "text on its own line": f"Linha 1\n{value}\nLinha 3",
        "text after a backslash path": f"C:\\dados\\{value}",
        "text that is json": json.dumps({"nota": f"a\n{value}"}),
    }


def number_json(value: int) -> dict[str, str]:
    return {
        "json integer": json.dumps({"amount": value}),
        "json integer in json": json.dumps({"inner": json.dumps({"n": value})}),
        "json integer in a list": json.dumps({"values": [1, value]}),
    }


def values_for(kind: str, forms: dict[str, str] = FORMS) -> dict[str, str]:
    out = {}
    for form, value in forms.items():
        encodings = json_texts(value) if kind == JSON else text_forms(value)
        out.update({f"{form} / {encoding}": text for encoding, text in encodings.items()})
    if kind == JSON and forms is FORMS:
        for form, number in NUMBERS.items():
            out.update({f"{form} / {encoding}": text for encoding, text in number_json(number).items()})
    return out


def leaf_paths(spec: dict, prefix: tuple = ()) -> list[tuple[tuple[str, ...], str]]:
    """(path of keys, TEXT | JSON) of every leaf the field map visits."""
    out = []
    for key, sub in spec.items():
        if isinstance(sub, dict):
            out += leaf_paths(sub, (*prefix, key))
        else:
            out.append(((*prefix, key), sub))
    return out


LISTS = {"messages", "parts", "tool_definitions", "documents", "tool_executions", "output_messages", "feedback"}


def planted(row: dict, path: tuple[str, ...], value: object) -> dict:
    """A copy of ``row`` with ``value`` at ``path`` (a new one-element list where
    the path runs through a list column, a new struct where it runs through one)."""
    row = copy.deepcopy(row)
    holder = row
    for key in path[:-1]:
        if key in LISTS:
            holder[key] = [{}]
            holder = holder[key][0]
        else:
            holder[key] = dict(holder.get(key) or {})
            holder = holder[key]
    holder[path[-1]] = value
    return row


# identifier columns of every shape: strings, lists of strings, structs, lists of structs, maps
IDENTIFIER_COLUMNS = {
    "calls": {
        "service": lambda v: v,
        "session_id": lambda v: v,
        "source_uri": lambda v: f"s3://traces/by user {v} day.json",
        "capture_missing": lambda v: ["seed", v],
        "tags": lambda v: ["vip", v],
        "segment": lambda v: {"user_tier": "pro", "account": v},
        "block_hashes": lambda v: [{"block": f"doc:{v}", "sha256": "ab" * 32, "tokens": 3, "algorithm": "sha256"}],
    },
    "spans": {"name": lambda v: f"call {v}", "tool_name": lambda v: v, "user_id": lambda v: v},
}


def counted(data: pl.DataFrame, table: str) -> dict[int, dict[str, int]]:
    return scan(data, table, load_policy())


@pytest.mark.parametrize("table", ["calls", "spans"])
def test_every_form_in_every_column_is_counted(redacted_rows, table):
    base = (redacted_rows.calls if table == "calls" else redacted_rows.spans)[:40]
    rows, names = [], []
    for i, (path, kind) in enumerate(leaf_paths(FIELDS[table])):
        for j, (name, value) in enumerate(values_for(kind).items()):
            rows.append(planted(base[(i * 31 + j) % len(base)], path, value))
            names.append(f"{'.'.join(path)}: {name}")
    for i, (column, shape) in enumerate(IDENTIFIER_COLUMNS[table].items()):
        for j, (name, value) in enumerate(IDENTIFIER_FORMS.items()):
            rows.append(planted(base[(i * 7 + j) % len(base)], (column,), shape(value)))
            names.append(f"{column}: {name}")
    rows += base  # and clean rows around them
    names += [f"clean row {i}" for i in range(len(base))]
    full = counted(frame(rows, table), table)
    # every plant is found, and the clean rows are clean
    # a CPF or card in Arabic-Indic or fullwidth digits too: the scan reads them as the recognizers do
    assert [name for i, name in enumerate(names) if i not in full] == [n for n in names if n.startswith("clean")]


def test_every_form_in_quarantine_messages_is_counted():
    values = {**values_for(TEXT), **values_for(JSON)}
    names = [*values, "clean"]
    rows = [{"message": message} for message in [*values.values(), "a calls row from line 3 was not written"]]
    full = counted(pl.DataFrame(rows), "quarantine")
    assert [name for i, name in enumerate(names) if i not in full] == ["clean"]
