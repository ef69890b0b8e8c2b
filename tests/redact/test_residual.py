"""The residual-PII scan: passes on redacted tables, fails when a raw value is planted
past the redactor, never reports a value; and its gate (polars, ``GATE``) passes over no
cell the walk of every cell would count: every pattern form, in every column of `calls`,
`spans` and `quarantine`, plain, inside JSON text, behind JSON and \\u escapes, in other
scripts' digits, gives exactly the counts of ``scan(walk_all=True)``."""

from __future__ import annotations

import copy
import json
import random
import sys

import polars as pl
import pytest
import regex

from pipelines.redact import check_digits
from pipelines.redact.policy import load_policy
from pipelines.redact.redactor import Redactor
from pipelines.redact.residual import GATE, patterns_for_mode, residual_pii_check, scan
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
    request["metadata"]["account_id"] = 52998224725  # an id key, not an identity key (those count as identity)
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


def assert_same_counts(data: pl.DataFrame, table: str, names: list[str]) -> dict[int, dict[str, int]]:
    policy = load_policy()
    fast = scan(data, table, policy)
    full = scan(data, table, policy, walk_all=True)
    differing = [(names[i], fast.get(i), full.get(i)) for i in range(len(names)) if fast.get(i) != full.get(i)]
    assert not differing, differing[:10]
    return full


@pytest.mark.parametrize("table", ["calls", "spans"])
def test_every_form_in_every_column_counts_as_walking_every_cell_counts(redacted_rows, table):
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
    full = assert_same_counts(frame(rows, table), table, names)
    # the plants were found, not merely agreed on (and the clean rows are clean)
    # a CPF or card in Arabic-Indic or fullwidth digits too: the scan reads them as the recognizers do
    assert [name for i, name in enumerate(names) if i not in full] == [n for n in names if n.startswith("clean")]


def test_every_form_in_quarantine_messages_counts_as_walking_every_cell_counts():
    values = {**values_for(TEXT), **values_for(JSON)}
    names = [*values, "clean"]
    rows = [{"message": message} for message in [*values.values(), "a calls row from line 3 was not written"]]
    full = assert_same_counts(pl.DataFrame(rows), "quarantine", names)
    assert [name for i, name in enumerate(names) if i not in full] == ["clean"]


def test_rust_digits_are_at_least_the_scan_digits():
    """Every character the scan's patterns read as a digit (``regex``'s ``\\d``), the
    gate in polars reads as one too (Rust's ``\\d`` misses some that came after its
    Unicode version: the gate adds unassigned code points)."""
    everything = "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)
    digits = regex.findall(r"\d", everything)
    assert len(digits) > 500
    runs = pl.Series([d * 11 for d in digits])
    assert runs.str.contains(GATE).all()


def mutated(text: str, rng: random.Random) -> str:
    """A value with a random form planted somewhere in it, escaped at random."""
    value = rng.choice([*FORMS.values(), *map(str, NUMBERS.values())])
    if rng.random() < 0.3:  # broken up: some of these still count, most do not
        cut = rng.randrange(len(value))
        value = value[:cut] + rng.choice(["\\n", "\\", " ", "\\/", "\n", '\\"', "-"]) + value[cut:]
    at = rng.randrange(len(text) + 1)
    return text[:at] + value + text[at:]


def _mutate_row(row: dict, table: str, rng: random.Random) -> dict:
    path, kind = rng.choice(leaf_paths(FIELDS[table]))
    holder: object = row
    for key in path[:-1]:
        holder = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(holder, list):
            holder = holder[0] if holder else None
        if holder is None:
            return planted(row, path, mutated("", rng))
    current = holder.get(path[-1]) if isinstance(holder, dict) else None
    if isinstance(current, str) and kind == JSON and current.startswith(("{", "[")):
        # inside one of its string tokens, so that the JSON stays JSON
        quote = current.find('"', rng.randrange(len(current)))
        if quote > 0:
            holder[path[-1]] = current[: quote + 1] + mutated("", rng).replace('"', "'") + current[quote + 1 :]
            return row
    if isinstance(holder, dict):
        holder[path[-1]] = mutated(current if isinstance(current, str) else "", rng)
    return row


@pytest.mark.parametrize("table", ["calls", "spans"])
def test_random_plants_in_the_corpus_count_as_walking_every_cell_counts(corpus_rows, redacted_rows, table):
    """Differential: redacted rows with values planted at random places in random leaves
    (some broken by escapes), or in identifier columns, the raw corpus, and the redacted one."""
    rng = random.Random(61 if table == "calls" else 67)
    base = redacted_rows.calls if table == "calls" else redacted_rows.spans
    raw = corpus_rows[0] if table == "calls" else corpus_rows[1]
    rows = [_mutate_row(copy.deepcopy(rng.choice(base)), table, rng) for _ in range(600)]
    for _ in range(200):
        column, shape = rng.choice(list(IDENTIFIER_COLUMNS[table].items()))
        rows.append(planted(rng.choice(base), (column,), shape(mutated(rng.choice(["", "id-1", "a b"]), rng))))
    rows += list(raw) + list(base)
    full = assert_same_counts(frame(rows, table), table, [f"row {i}" for i in range(len(rows))])
    assert 100 < sum(1 for at in full if at < 600) < 600  # plants found, and some not counted
    assert 20 < sum(1 for at in full if 600 <= at < 800) < 200


def test_the_gate_leaves_most_of_a_redacted_table_unwalked(redacted_frame):
    """The fast path is taken: on redacted rows the walk reaches few cells (which hold
    what the redactor leaves on purpose: placeholders' digits, ids, formatted hashes)."""
    from pipelines.redact.residual import SCANNED, _flagged

    # the patterns' gate (the identity keys add the cells that hold one: this corpus plants many)
    spec, _ = SCANNED["calls"]
    flagged = sum(
        _flagged(redacted_frame.select(c), c, spec.get(c), c in spec, GATE).sum() for c in redacted_frame.columns
    )
    assert 0 < flagged < redacted_frame.height * 0.5


# a value left under an identity key, in the ways a JSON text may write the key and the value
IDENTITY_TEXTS = {
    "integer": json.dumps({"tax_id": 48152978}),
    "camel case key": json.dumps({"taxId": 48152978}),
    "string with bad check digits": json.dumps({"cpf": "123.456.789-00"}),
    "in json in json": json.dumps({"inner": json.dumps({"documento": 123456789})}),
    "otel attribute list": json.dumps([{"key": "ssn", "value": {"intValue": "123456789"}}]),
    "key with escapes": '{"\\u0074ax_id": 48152978}',
}


def test_values_left_under_identity_keys_count_as_walking_every_cell_counts(redacted_rows):
    base = redacted_rows.calls[:10]
    rows = [planted(base[i % len(base)], ("extra_json",), text) for i, text in enumerate(IDENTITY_TEXTS.values())]
    rows.append(planted(base[0], ("extra_json",), json.dumps({"tax_id": "<BR_CPF_1>", "document": "the report"})))
    names = [*IDENTITY_TEXTS, "replaced"]
    full = assert_same_counts(frame(rows), "calls", names)
    assert sorted(at for at, counts in full.items() if counts["identity"]) == list(range(len(IDENTITY_TEXTS)))
