"""The residual check's prefilter (``residual_prefilter.candidate_rows``) must
never pass over a row the full walk would flag: every pattern form, in every
scanned column of `calls`, `spans` and `quarantine`, plain, inside JSON text,
behind JSON escapes and \\u escapes, in other scripts' digits, gives exactly
the per-row counts of walking every leaf of every row (``walk_all=True``)."""

from __future__ import annotations

import copy
import json
import random
import sys

import polars as pl
import pytest
import regex

from pipelines.redact import check_digits, residual
from pipelines.redact.policy import load_policy
from pipelines.redact.residual import RAW_GATE, may_match_any_reading, residual_counts
from pipelines.redact.row_fields import FIELDS, JSON, TEXT, walk_row
from pipelines.resources.warehouse import to_arrow


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


def planted(row: dict, path: tuple[str, ...], value: str) -> dict:
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


def values_for(kind: str) -> dict[str, str]:
    out = {}
    for form, value in FORMS.items():
        encodings = json_texts(value) if kind == JSON else text_forms(value)
        out.update({f"{form} / {encoding}": text for encoding, text in encodings.items()})
    if kind == JSON:
        for form, number in NUMBERS.items():
            out.update({f"{form} / {encoding}": text for encoding, text in number_json(number).items()})
    return out


def assert_same_counts(frame: pl.DataFrame, table: str | None, names: list[str], **kwargs) -> list[dict[str, int]]:
    policy = load_policy()
    fast, scanned = residual_counts(frame, table, policy=policy, **kwargs)
    full, _ = residual_counts(frame, table, policy=policy, walk_all=True, **kwargs)
    assert scanned
    differing = [(names[i], fast[i], full[i]) for i in range(len(full)) if fast[i] != full[i]]
    assert not differing, differing[:10]
    return full


def assert_every_plant_is_a_candidate(frame: pl.DataFrame, table: str | None, names: list[str], columns) -> None:
    from pipelines.redact.residual_prefilter import candidate_cells, candidate_rows

    spec = FIELDS.get(table or "")
    found = candidate_rows(frame, spec, columns or list(spec), RAW_GATE)
    assert [name for name, hit in zip(names, found, strict=True) if not hit and not name.startswith("clean")] == []
    # searched in slices, one thread each (as a day's `calls` is): the same cells
    whole = candidate_cells(frame, spec, columns or list(spec), RAW_GATE, parts=1)
    for parts in (2, 3, 7):
        sliced = candidate_cells(frame, spec, columns or list(spec), RAW_GATE, parts=parts)
        assert sliced.keys() == whole.keys(), parts
        assert all((sliced[column] == cells).all() for column, cells in whole.items()), parts


@pytest.mark.parametrize("table", ["calls", "spans"])
def test_every_form_in_every_column_counts_as_the_full_walk_counts(redacted_rows, table):
    base = (redacted_rows.calls if table == "calls" else redacted_rows.spans)[:40]
    rows, names = [], []
    for i, (path, kind) in enumerate(leaf_paths(FIELDS[table])):
        for j, (name, value) in enumerate(values_for(kind).items()):
            rows.append(planted(base[(i * 31 + j) % len(base)], path, value))
            names.append(f"{'.'.join(path)}: {name}")
    rows += base  # and clean rows around them
    names += [f"clean row {i}" for i in range(len(base))]
    frame = pl.from_arrow(to_arrow(table, rows))
    full = assert_same_counts(frame, table, names)
    missed = [name for name, counts in zip(names, full, strict=True) if not any(counts.values())]
    # the plants were found, not merely agreed on (and the clean rows are clean)
    # a CPF or card in Arabic-Indic or fullwidth digits too: the scan reads them as the recognizers do
    assert missed == [n for n in names if n.startswith("clean")]
    assert_every_plant_is_a_candidate(frame, table, names, None)


def test_every_form_in_quarantine_messages_counts_as_the_full_walk_counts():
    values = {**values_for(TEXT), **values_for(JSON)}
    names = [*values, "clean"]
    frame = pl.DataFrame({"message": [*values.values(), "a calls row from line 3 was not written"]})
    full = assert_same_counts(frame, None, names, columns=["message"])
    missed = [name for name, counts in zip(names, full, strict=True) if not any(counts.values())]
    assert missed == ["clean"]
    assert_every_plant_is_a_candidate(frame, None, names, ["message"])


def test_the_raw_gate_finds_every_reading_the_screen_gate_finds():
    """``RAW_GATE`` in polars is true wherever ``may_match_any_reading`` is, on
    random strings made of what the patterns and JSON escapes are made of."""
    rng = random.Random(2026)
    alphabet = "0123456789" * 4 + ' .-/\\\\\\n"tru@AKIAPRIVATE KEY_gh_p' + "٣٥" + "sk-xoxeyJ"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(4, 40))) for _ in range(60_000)]
    expected = [may_match_any_reading(text) for text in texts]
    found = pl.Series(texts).str.contains(RAW_GATE).to_list()
    missed = [text for text, want, got in zip(texts, expected, found, strict=True) if want and not got]
    assert missed == []
    assert 5_000 < sum(expected) < 55_000  # both outcomes were exercised


def test_the_shortcuts_of_may_match_any_reading_change_no_answer():
    """Its escaped-text shortcuts answer as making both readings does, on random
    escaped strings of digits, separators, escapes, key prefixes and CNPJ shapes."""
    rng = random.Random(2027)

    def by_readings(value: str) -> bool:
        if "\\" not in value:
            return residual.may_match(value)
        if "\\u" in value:
            return True
        unescaped = residual._OTHER_ESCAPE.sub(" ", residual._SLASH_ESCAPE.sub("/", value))
        return residual.may_match(value.replace("\\", " ")) or residual.may_match(unescaped)

    pieces = [
        *"0123456789" * 6,
        *" .-/\\\\",
        "\\n",
        "\\/",
        '\\"',
        "\\t",
        "AB",
        "PRIVATE",
        "KEY",
        "sk-",
        "gh",
        "p_",
        "٣",
    ]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(3, 40))) for _ in range(60_000)]
    texts = [text if "\\" in text else text + "\\n" for text in texts]
    answers = [(may_match_any_reading(text), by_readings(text)) for text in texts]
    assert [text for text, (fast, slow) in zip(texts, answers, strict=True) if fast != slow] == []
    assert 5_000 < sum(slow for _, slow in answers) < 55_000


def test_rust_digits_are_at_least_the_scan_digits():
    """Every character the scan's patterns read as a digit (``regex``'s ``\\d``),
    the gate's digit class in polars reads as one too (Rust's ``\\d`` misses ten
    that came after its Unicode version: the class adds unassigned code points)."""
    everything = "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)
    digits = regex.findall(r"\d", everything)
    assert len(digits) > 500
    assert pl.Series(digits).str.contains(f"^{residual._ANY_DIGIT}$").all()
    assert residual._DIGIT_RUN.search("٥٢٩٩٨٢٢٤٧٢٥") and pl.Series(["٥٢٩٩٨٢٢٤٧٢٥"]).str.contains(RAW_GATE).all()


def mutated(text: str, rng: random.Random) -> str:
    """A value with a random form planted somewhere in it, escaped at random."""
    value = rng.choice([*FORMS.values(), *map(str, NUMBERS.values())])
    if rng.random() < 0.3:  # broken up: some of these still count, most do not
        cut = rng.randrange(len(value))
        value = value[:cut] + rng.choice(["\\n", "\\", " ", "\\/", "\n", '\\"', "-"]) + value[cut:]
    at = rng.randrange(len(text) + 1)
    return text[:at] + value + text[at:]


def _mutate_row(row: dict, table: str, rng: random.Random) -> dict:
    paths = leaf_paths(FIELDS[table])
    path, kind = rng.choice(paths)
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
def test_random_plants_in_the_corpus_count_as_the_full_walk_counts(corpus_rows, redacted_rows, table):
    """Differential: redacted rows with values planted at random places in random
    leaves (some broken by escapes), the raw corpus, and the redacted one as it is."""
    rng = random.Random(61 if table == "calls" else 67)
    base = redacted_rows.calls if table == "calls" else redacted_rows.spans
    raw = corpus_rows[0] if table == "calls" else corpus_rows[1]
    rows = [_mutate_row(copy.deepcopy(rng.choice(base)), table, rng) for _ in range(600)]
    rows += list(raw) + list(base)
    full = assert_same_counts(pl.from_arrow(to_arrow(table, rows)), table, [f"row {i}" for i in range(len(rows))])
    assert 100 < sum(any(c.values()) for c in full[:600]) < 600  # plants found, and some not counted


def written_values(rows: list[dict], table: str) -> list[list[tuple[str, str, str]]]:
    """Each row's text column values with kind and path, as the redactor's apply pass hands them to the screen."""
    from pipelines.redact.field_rules import FieldRules
    from pipelines.redact.walker import JsonWalker

    walker, out = JsonWalker(FieldRules(load_policy())), []

    class Keep:
        def text(self, value, path, info):
            return None

        def number(self, value, path, info):
            return None

    for row in rows:
        kept: list[tuple[str, str, str]] = []
        walk_row(
            row, table, walker, Keep(), inspect=lambda value, kind, path, kept=kept: kept.append((value, kind, path))
        )
        out.append(kept)
    return out


@pytest.mark.parametrize("table", ["calls", "spans"])
def test_the_batched_text_screen_finds_what_the_screen_finds_row_by_row(corpus_rows, redacted_rows, table):
    """``TextScreen.rows`` (one polars search first) against ``TextScreen.row`` on
    each row: every form in every leaf, random plants, the raw and redacted corpora."""
    rng = random.Random(71)
    base = redacted_rows.calls if table == "calls" else redacted_rows.spans
    rows = [planted(base[i % len(base)], path, value) for i, (path, kind) in enumerate(leaf_paths(FIELDS[table]))
            for value in values_for(kind).values()]  # fmt: skip
    rows += [_mutate_row(copy.deepcopy(rng.choice(base)), table, rng) for _ in range(300)]
    rows += list(corpus_rows[0] if table == "calls" else corpus_rows[1]) + list(base)
    written = written_values(rows, table)
    policy = load_policy()
    screen = residual.TextScreen(policy)  # one per shard in the redactor
    one_by_one = [screen.row(values) for values in written]
    assert residual.TextScreen(policy).rows(written) == one_by_one
    assert sum(map(bool, one_by_one)) > len(rows) // 4
