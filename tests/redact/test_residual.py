"""The residual-PII check (Great Expectations): passes on redacted tables,
fails when a raw value is planted past the redactor, and never reports a value."""

from __future__ import annotations

import copy
import json
import random

import polars as pl
import pytest

from pipelines.redact.policy import load_policy
from pipelines.redact.redactor import Redactor
from pipelines.redact.residual import patterns_for_mode, residual_pii_check, row_residuals
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


# Values where a quick look at the whole column could miss a leaf's match: after a
# JSON escape, inside JSON inside JSON, after a literal backslash, written with
# \u escapes or an escaped slash, as a negative integer, or in an identifier column.
TRICKY = {
    "output_text": "Linha 1\n529.982.247-25",
    "error_message": "C:\\rk_live_" + "Zq9" * 8,
    "extra_json": [
        json.dumps({"note": "a\n529.982.247-25"}),
        json.dumps({"inner": json.dumps({"nota": "b\n52998224725"})}),
        json.dumps({"amount": -4111111111111111}),
        json.dumps({"e": "José joana.prado@gmail.com"}, ensure_ascii=True),
        '{"c": "11.222.333\\/0001-81"}',
        json.dumps({"k": "-----BEGIN PRIVATE KEY-----\n" + "MIIEv" * 10 + "\n-----END PRIVATE KEY-----"}),
        # the screen's first look at a whole value (``may_match_any_reading``) must let these through
        '{"e": "joana.prado\\u0040gmail.com"}',
        json.dumps({"inner": json.dumps({"n": 52998224725})}),
        json.dumps({"q": 'ele disse "52998224725"\tok'}),
        json.dumps({"deep": json.dumps({"deeper": json.dumps({"c": "11.222.333/0001-81"})})}),
        json.dumps({"t": "token ghp_" + "a1B2" * 9}),
    ],
    "session_id": "joana.prado@gmail.com",
    "tags": {"cpf": "529.982.247-25"},
}


def tricky_rows(calls: list[dict]) -> list[dict]:
    rows = []
    for i, (column, values) in enumerate(TRICKY.items()):
        for j, value in enumerate(values if isinstance(values, list) else [values]):
            row = copy.deepcopy(calls[(i * 7 + j) % len(calls)])
            row[column] = value
            rows.append(row)
    return rows


def test_the_screen_finds_what_walking_every_leaf_finds(corpus_rows, redacted_rows):
    policy = load_policy()
    tricky = tricky_rows(redacted_rows.calls)
    found = row_residuals(tricky, "calls", policy)
    assert all(found), [TRICKY_NAMES[i] for i, f in enumerate(found) if not f]
    for rows, table in (
        (tricky, "calls"),
        (corpus_rows[0], "calls"),
        (corpus_rows[1], "spans"),
        (redacted_rows.calls, "calls"),
        (redacted_rows.spans, "spans"),
    ):
        assert row_residuals(rows, table, policy) == row_residuals(rows, table, policy, walk_all=True), table
    assert sum(map(bool, row_residuals(corpus_rows[0], "calls", policy))) > len(corpus_rows[0]) // 2


TRICKY_NAMES = [f"{c}[{j}]" for c, v in TRICKY.items() for j in range(len(v) if isinstance(v, list) else 1)]


def test_the_ascii_digit_gate_finds_what_the_digit_run_pattern_finds():
    """``may_match``'s faster search for ASCII text agrees with the pattern it
    stands for, on strings made of digits and the separators the runs allow."""
    from pipelines.redact import residual

    rng = random.Random(13)
    found = 0
    for _ in range(20_000):
        text = "".join(rng.choice("0123456789012345678901234567890123456789.-/ x") for _ in range(rng.randint(8, 40)))
        expected = residual._DIGIT_RUN.search(text) is not None
        assert (residual._ASCII_DIGIT_RUN.search(text) is not None) == expected, text
        found += expected
    assert 1_000 < found < 19_000  # both outcomes were exercised


# Identifier columns of every shape the screen gathers differently: scalar strings (one
# with a quote, which it judges JSON-escaped), dicts of scalars, lists of scalars, lists of dicts
IDENTIFIER_PLANTS = {
    "calls": {
        "session_id": "joana.prado@gmail.com",
        "source_uri": "s3://traces/5555 5555 5555 4444.json",
        "model_alias": 'modelo "529.982.247-25"',
        "segment": {"user_tier": "joana.prado@gmail.com"},
        "params": {"stop_sequences": None, "note": "11.222.333/0001-81"},
        "capture_missing": ["seed", "529.982.247-25"],
        "block_hashes": [{"block": "doc:joana.prado@gmail.com", "sha256": "ab" * 32, "algorithm": "sha256"}],
        "tags": {"k": "sk-ant-api03-" + "Zq9" * 30},
    },
    "spans": {
        "name": "call joana.prado@gmail.com",
        "tool_name": "card 5555-5555-5555-4444",
        "user_id": "529.982.247-25",
    },
}


def with_plants(base: list[dict], plants: dict[str, object], rng: random.Random) -> tuple[list[dict], list[dict]]:
    """``base`` and, at random places, copies of random rows of it with one plant each
    (each plant in three rows: the same value in several shards, judged once, found in
    each); and the planted rows."""
    planted = []
    for column, value in plants.items():
        for _ in range(3):
            row = copy.deepcopy(rng.choice(base))
            row[column] = copy.deepcopy(value)
            planted.append(row)
    rows = [*base, *planted]
    rng.shuffle(rows)
    return rows, planted


@pytest.mark.parametrize("table", ["calls", "spans"])
def test_one_row_screen_over_many_shards_finds_what_walking_every_leaf_finds(redacted_rows, table):
    """The redactor keeps one ``RowScreen`` for every shard of a redaction (its
    judgements carried from shard to shard): over random shards it finds, row by
    row, what ``row_residuals`` finds walking every leaf of all rows at once."""
    from pipelines.redact.residual import IDENTIFIER_COLUMNS, RowScreen

    rng = random.Random(8)
    base = redacted_rows.calls if table == "calls" else redacted_rows.spans
    rows, planted = with_plants(base, IDENTIFIER_PLANTS[table], rng)
    policy = load_policy()
    for part in (IDENTIFIER_COLUMNS, None):
        screen, found, at = RowScreen(policy), [], 0
        while at < len(rows):
            size = rng.randint(1, 40)
            found += screen.residuals(rows[at : at + size], table, part=part)
            at += size
        assert found == row_residuals(rows, table, policy, walk_all=True, part=part), part
        held = [row for row, classes in zip(rows, found, strict=True) if classes]
        assert all(any(row is p for row in held) for p in planted), part


def same_shape_plants(base: dict) -> dict[str, object]:
    """Identifier values of the shapes the screen takes at C speed when every row has
    them (dicts with the base's keys, lists of such dicts), with PII in one value, and
    the shapes next to them that leave that path: a dict with as many keys but another
    one, an empty dict, a list inside a dict, a string in a number column."""
    block = dict(base["block_hashes"][0])
    usage = dict(base["usage"])
    params = dict(base["params"])
    other_key = dict(list(usage.items())[:-1])
    other_key["cpf"] = "529.982.247-25"
    return {
        "block_hashes": [*base["block_hashes"], {**block, "block": "doc:joana.prado@gmail.com"}],
        "usage": {**usage, "input_tokens": "529.982.247-25"},
        "params": {**params, "stop_sequences": ["5555 5555 5555 4444"]},
        "segment": other_key,
        "capture_missing": [{}, "11.222.333/0001-81"],
        "tags": [{}, {"k": "joana.prado@gmail.com"}],
        "latency_ms": "joana.prado@gmail.com",
        "source_line": "sk-ant-api03-" + "Zq9" * 30,
    }


def test_the_identifier_screen_of_every_column_shape_finds_what_walking_every_leaf_finds(redacted_rows):
    """Plants in every shape an identifier column takes, in shards where every other
    row shares the shape's keys (the screen's fast path) or not: one ``RowScreen``
    holds every planted row, and finds row by row what walking every leaf finds."""
    from pipelines.redact.residual import IDENTIFIER_COLUMNS, RowScreen

    base = redacted_rows.calls
    rows, planted = with_plants(base, same_shape_plants(base[0]), random.Random(21))
    policy = load_policy()
    for size in (1, 7, 60, len(rows)):
        screen = RowScreen(policy)
        found = [
            c
            for at in range(0, len(rows), size)
            for c in screen.residuals(rows[at : at + size], "calls", part=IDENTIFIER_COLUMNS)
        ]
        assert found == row_residuals(rows, "calls", policy, walk_all=True, part=IDENTIFIER_COLUMNS), size
        held = [row for row, classes in zip(rows, found, strict=True) if classes]
        assert all(any(row is p for row in held) for p in planted), size


# Strings an identifier column may hold, of the characters the screen's gates turn on
_ID_PIECES = [
    "ab12", "0", "7", "12345", "678901", "2345", "_", "-", ".", "/", " ", "@", "x@y.com.br", "gh", "ghp_", "_live_",
    "sk-ant-", "sk_test_", "AKIA", "eyJ", "Zq9", "A", "msg_", '"', "\\", "\\n", "\\u00e9", "\n", "\t", "\x00",
    "\u0663", "\U00011de0", "é", "529.982.247-25", "5555 5555 5555 4444", "11.222.333/0001-81", "12ABC34501DE35",
]  # fmt: skip


def test_a_cell_settled_on_arrow_is_one_the_identifier_screen_finds_nothing_in():
    """``settled_cells`` judges identifier values on Arrow (polars) so that the screen
    need not: every value it settles, in a string column or a list of strings, is one
    the screen walking every leaf finds nothing in; and it settles plain ids, hashes and
    uris but not every string (the fast path is taken and left)."""
    import pyarrow as pa

    from pipelines.redact.residual import IDENTIFIER_COLUMNS, RowScreen, settled_cells

    rng = random.Random(31)
    strings = ["", "ab" * 32, "s3://traces/2026/11/29/calls-00017.jsonl", "gpt-4o-mini", "msg_0522123620b3afa1e49a1103"]
    strings += ["".join(rng.choice(_ID_PIECES) for _ in range(rng.randint(1, 6))) for _ in range(4_000)]
    lists = [[rng.choice(strings) for _ in range(rng.randint(0, 3))] for _ in range(1_000)] + [None, [None, "ab"]]
    strings_batch = pa.RecordBatch.from_pydict(
        {"names": pa.array([*strings, None], pa.string()), "texts": pa.array([None, *strings], pa.large_string())}
    )
    others_batch = pa.RecordBatch.from_pydict(
        {
            "labels": pa.array(lists, pa.list_(pa.string())),
            "tokens": pa.array(range(len(lists)), pa.int64()),
            "at": pa.array([None] * len(lists), pa.timestamp("us", tz="UTC")),
            "usage": pa.array([{"n": 1}] * len(lists), pa.struct([("n", pa.int64())])),
        }
    )
    names = settled_cells(strings_batch, ["names", "texts"])
    others = settled_cells(others_batch, ["labels", "tokens", "at", "usage"])
    assert set(others) == {"labels", "tokens", "at"}  # a struct is left to the screen
    assert others["tokens"].all() and others["at"].all()
    screen = RowScreen(load_policy())
    for column, values, settled in (
        ("names", [*strings, None], names["names"]),
        ("texts", [None, *strings], names["texts"]),
        ("labels", lists, others["labels"]),
    ):
        found = screen.residuals([{column: v} for v in values], "calls", walk_all=True, part=IDENTIFIER_COLUMNS)
        assert not [v for v, f, s in zip(values, found, settled, strict=True) if f and s], column
        assert 0.1 < settled.mean() < 0.9, column  # both outcomes exercised
        assert sum(map(bool, found)) > 50, column
    assert names["names"][:4].all()  # the empty string, the hash, the uri, the model
    assert not names["names"][4]  # "_" and a digit run: left to the screen, which judges it clean


def test_the_identifier_screen_does_not_judge_a_settled_cell_again(redacted_rows):
    """``RowScreen.residuals(settled=)`` judges only the values not settled: with every
    row's planted column claimed settled the plants are not found (the claim is used),
    with ``settled_cells``' own judgement they all are, row by row as walking every leaf."""
    from pipelines.record.rows import from_columns
    from pipelines.record.schema import TABLES
    from pipelines.redact.residual import IDENTIFIER_COLUMNS, RowScreen, settled_cells

    plants = {
        "service": "joana.prado@gmail.com",
        "release": 'v"529.982.247-25"',
        "provider_request_id": "ghp_" + "A1b" * 12,
        "source_uri": "s3://traces/5555 5555 5555 4444.json",
        "capture_missing": ["seed", "11.222.333/0001-81"],
    }
    rows, planted = with_plants(redacted_rows.calls, plants, random.Random(5))
    record_batch = from_columns(rows, TABLES["calls"])
    settled = settled_cells(record_batch, [*plants, "call_id", "trace_id", "latency_ms", "usage"])
    assert set(settled) == {*plants, "call_id", "trace_id", "latency_ms"}
    assert all(settled[c].sum() == len(rows) - 3 for c in plants)  # only the planted cells are left
    policy = load_policy()
    expected = row_residuals(rows, "calls", policy, walk_all=True, part=IDENTIFIER_COLUMNS)
    for size in (1, 7, len(rows)):
        screen = RowScreen(policy)
        found = [
            c
            for at in range(0, len(rows), size)
            for c in screen.residuals(
                rows[at : at + size],
                "calls",
                part=IDENTIFIER_COLUMNS,
                settled={column: cells[at : at + size] for column, cells in settled.items()},
            )
        ]
        assert found == expected, size
    held = [row for row, classes in zip(rows, expected, strict=True) if classes]
    assert all(any(row is p for row in held) for p in planted)
    claimed = {column: [True] * len(rows) for column in plants}
    assert not any(RowScreen(policy).residuals(rows, "calls", part=IDENTIFIER_COLUMNS, settled=claimed))
