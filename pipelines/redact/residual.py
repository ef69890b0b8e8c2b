"""The residual-PII scan: did anything the redactor must catch get through?

One scan, independent of the redactor: it reads Arrow tables (the ones ingest is
about to write, for the pre-write screen in ``screen.py``; the ones written, for
the blocking asset checks), never the redactor's own state, so a redactor that
misses a value cannot hide it from the scan.

The rules need no judgement: emails outside the reserved ``example.*`` domains,
CPFs and CNPJs with valid check digits, Luhn-valid card numbers, API keys, and
a number or digits left under an identity key of the policy (``identity``).
The redactor's text columns (``row_fields.FIELDS``) are walked leaf by leaf with
its field rules; every other string of `calls`, `spans` and `redaction_audit` is
read as an identifier (a bare digit run such as a hash does not count there,
typed numbers never). Counts per row, never the matches; Great Expectations
checks that every count is zero.

Synthetic mode writes valid-looking CPFs, CNPJs and cards on purpose: scan its
tables with ``patterns_for_mode("synthetic")``.

Fast path: polars searches every string of a cell for ``GATE`` (what a match
needs in the raw text, JSON escapes included), and only the cells it flags are
walked in Python. ``walk_all=True`` walks every cell (the reference;
``tests/redact/test_residual.py`` holds the two to the same counts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import regex

from pipelines.ingest.quality import gx_batch, same_rule
from pipelines.redact.check_digits import is_valid_card, is_valid_cnpj, is_valid_cpf
from pipelines.redact.email_domains import has_public_suffix, is_reserved
from pipelines.redact.field_rules import RAW_IDENTITY, FieldInfo, FieldRules, whole_entity
from pipelines.redact.patterns import (
    CARD,
    CNPJ_FORMATTED,
    CNPJ_PLAIN,
    CPF_FORMATTED,
    CPF_PLAIN,
    CREDENTIALS,
    compiled,
    with_ascii_digits,
)
from pipelines.redact.policy import Policy, load_policy
from pipelines.redact.row_fields import FIELDS, TEXT, walk_row
from pipelines.redact.walker import JsonWalker

PATTERNS = ("email", "cpf", "cnpj", "card", "api_key", "identity")
API_KEY_PATTERNS = (
    "anthropic_api_key", "openai_api_key", "aws_access_key_id", "github_token", "slack_token",
    "google_api_key", "stripe_key", "jwt", "private_key",
)  # fmt: skip
# What is scanned per table: the text columns (walked by their field map) and whether every
# other column is read as identifiers. A quarantine row's keys name the source's objects.
SCANNED: dict[str, tuple[Mapping[str, Any], bool]] = {
    "calls": (FIELDS["calls"], True),
    "spans": (FIELDS["spans"], True),
    "redaction_audit": ({}, True),
    "quarantine": ({"message": TEXT}, False),
}

_CPF = [regex.compile(CPF_FORMATTED), regex.compile(CPF_PLAIN)]
_CNPJ = [regex.compile(CNPJ_FORMATTED), regex.compile(CNPJ_PLAIN)]
_CARD = regex.compile(CARD)
_API_KEYS = [compiled(p) for p in CREDENTIALS if p.name in API_KEY_PATTERNS]
_NUMBERS = (("cpf", is_valid_cpf), ("cnpj", is_valid_cnpj), ("card", is_valid_card))

# What some match needs in a cell's raw text (a superset: polars's search, in Rust). A JSON
# writer escapes "/" (also nested: "\\\/"), and may write any character as \uXXXX; every other
# character a pattern needs is as it stands. Rust's \d comes from an older Unicode than
# ``regex``'s, so a code point it does not know (\p{Cn}) is taken for a digit.
_D = r"[\d\p{Cn}]"
_SLASH = r"\\*/"
_KEY_LITERALS = ("sk-", "AKIA", "ASIA", "ABIA", "ACCA", "github_pat_", "xox", "AIza", "_live_", "_test_", "eyJ")
GATE = "|".join(
    [
        r"\\u",
        "@",
        *_KEY_LITERALS,
        "PRIVATE KEY",
        "gh[pousr]_",
        # a formatted CNPJ, letters too (its digits only: below; letters with \p{Cn} make Rust's search 20x slower)
        rf"[A-Z\d]{{2}}\.[A-Z\d]{{3}}\.[A-Z\d]{{3}}{_SLASH}",
        rf"{_D}{{3}}\.{_D}{{3}}\.{_D}{{3}}-{_D}{{2}}",
        rf"{_D}{{9}}-?{_D}{{2}}",
        rf"{_D}{{2}}\.?{_D}{{3}}\.?{_D}{{3}}(?:{_SLASH})?{_D}{{4}}-?{_D}{{2}}",
        rf"{_D}{{4}}[ -]?{_D}{{4}}[ -]?{_D}{{4}}",
        rf"{_D}{{4}}[ -]?{_D}{{6}}",
    ]
)


def identity_gate(policy: Policy) -> str:
    """``GATE`` and the policy's identity keys as a cell's raw text writes them before a value an
    identity could be left in (digits, spaces and ``./-``, as ``field_rules.RAW_IDENTITY``): a JSON
    key, quoted or escaped inside JSON text (``"tax_id": 48152978``, ``\\"cpf\\": \\"123.456``), a
    bare key (``taxId: 1``, ``cpf=1``), or an OTel attribute's name (``"ssn", "value": ...``). A key
    whose value is a placeholder or a token (``"tax_id": "<BR_CPF_1>"``), and the word in prose,
    open nothing: no value is left there."""
    keys = {glob.rsplit(".", 1)[-1].lower() for globs in policy.fields.identity.values() for glob in globs}
    names = sorted(regex.escape(key).replace(r"\*", r"\w*").replace("_", "[_ -]?") for key in keys)
    if not names:
        return GATE
    either, value = "|".join(names), r"(?:\\*[\"'])?[\s./-]*\d"
    quoted = rf"\\*[\"'](?:{either})\\*[\"'](?:\s*:\s*{value}|\s*,)"
    return rf"{GATE}|(?i:{quoted}|(?-u:\b)(?:{either})\s*[:=]\s*{value})"


# an identifier of lower-case letters and digits only (a hash, an id) holds nothing that counts
# there: a formatted number needs punctuation, an email "@", an API key "-", "_" or capitals
_PLAIN_ID = r"^[a-z0-9]*$"
_ROW = "__residual_row"


def patterns_for_mode(mode: str) -> tuple[str, ...]:
    """Synthetic values pass their check digits, and fill identity keys with digits, by design;
    the other patterns still apply."""
    return ("email", "api_key") if mode == "synthetic" else PATTERNS


@lru_cache(maxsize=1)
def _email_pattern() -> regex.Pattern:
    """presidio's own email pattern: the scan must not flag what the redactor could not match."""
    from presidio_analyzer.predefined_recognizers import EmailRecognizer

    return regex.compile(EmailRecognizer.PATTERNS[0].regex, regex.IGNORECASE | regex.DOTALL | regex.MULTILINE)


class _Counter:
    """A walker visitor counting the matches in one row's leaves. ``identifiers``: every
    leaf is read as an identifier (structural, typed numbers not counted)."""

    def __init__(self, wanted: Sequence[str], allow: frozenset[str], identifiers: bool = False):
        self.wanted = wanted
        self.allow = allow
        self.identifiers = identifiers
        self.counts = dict.fromkeys(wanted, 0)

    def text(self, value: str, path: str, info: FieldInfo) -> None:
        value = with_ascii_digits(value)  # as the recognizers read it
        if "identity" in self.wanted and info.identity and whole_entity(info, value) and RAW_IDENTITY.fullmatch(value):
            self.counts["identity"] += 1  # an identity key's value left as digits (no replacement writes one)
            return
        structural = self.identifiers or info.structural
        if "email" in self.wanted and "@" in value:
            found = (m.group() for m in _email_pattern().finditer(value))
            self._add("email", [e for e in found if not is_reserved(e) and has_public_suffix(e)])
        for name, finders, valid in (("cpf", _CPF, is_valid_cpf), ("cnpj", _CNPJ, is_valid_cnpj)):
            if name in self.wanted:
                found = {m.group() for p in finders for m in p.finditer(value)}  # the plain pattern re-finds some
                self._add(name, [f for f in found if valid(f) and not (structural and f.isalnum())])
        if "card" in self.wanted:
            found = (m.group() for m in _CARD.finditer(value))
            self._add("card", [f for f in found if is_valid_card(f) and not (structural and f.isalnum())])
        if "api_key" in self.wanted:
            self._add("api_key", [m.group() for p in _API_KEYS for m in p.finditer(value)])

    def number(self, value: int, path: str, info: FieldInfo) -> None:
        if "identity" in self.wanted and info.identity and whole_entity(info, str(value)):
            self.counts["identity"] += 1
            return
        # under id-like keys too: the redactor rewrites a validated CPF or card held as an integer anywhere
        if not self.identifiers:
            for name, valid in _NUMBERS:
                if name in self.wanted and valid(str(value)):
                    self.counts[name] += 1
                    return

    def _add(self, name: str, found: list[str]) -> None:
        self.counts[name] += sum(1 for value in found if value.casefold() not in self.allow)


def _as_json(value: Any) -> Any:
    """Map columns come as lists of (key, value) pairs: lists and dicts for the walker."""
    if isinstance(value, list | tuple):
        return [_as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    return value


def scan(
    data: pa.Table | pl.DataFrame,
    table: str,
    policy: Policy | None = None,
    patterns: Sequence[str] = PATTERNS,
    *,
    walk_all: bool = False,
) -> dict[int, dict[str, int]]:
    """The rows of ``data`` (a table of ``table``) holding residual PII: row position ->
    matches per pattern. Every other row is clean. ``walk_all``: walk every cell
    instead of those the gate flags (the same result, slower)."""
    policy = policy or load_policy()
    frame = data if isinstance(data, pl.DataFrame) else pl.from_arrow(data)
    spec, identifiers = SCANNED[table]
    columns = [c for c in frame.columns if c in spec or identifiers]
    walker = JsonWalker(FieldRules(policy))
    allow = frozenset(v.casefold() for v in policy.allow_list)
    public = policy.is_public_document if policy.public_documents else None
    wanted = tuple(patterns)
    gate = identity_gate(policy) if "identity" in wanted else GATE
    found: dict[int, dict[str, int]] = {}
    for column in columns:
        text = column in spec
        if walk_all:
            rows = np.flatnonzero(frame[column].is_not_null().to_numpy())
        else:
            flagged = _flagged(frame.select(column), column, spec.get(column) if text else None, text, gate)
            rows = np.flatnonzero(flagged)
        for at, value in zip(rows.tolist(), frame[column].gather(rows).to_list(), strict=True):
            counter = _Counter(wanted, allow, identifiers=not text)
            if table in FIELDS and text:
                walk_row({column: value}, table, walker, counter, public)
            elif text:
                walker.walk(value, column, counter)
            else:
                walker.walk(_as_json(value), column, counter)
            if any(counter.counts.values()):
                total = found.setdefault(at, dict.fromkeys(wanted, 0))
                for name, n in counter.counts.items():
                    total[name] += n
    return dict(sorted(found.items()))


def classes(found: Mapping[int, Mapping[str, int]], rows: int) -> list[tuple[str, ...]]:
    """``scan``'s result as the pattern classes found in each of ``rows`` rows (() when clean)."""
    out: list[tuple[str, ...]] = [()] * rows
    for at, counts in found.items():
        out[at] = tuple(name for name, n in counts.items() if n)
    return out


def _flagged(frame: pl.DataFrame, column: str, spec: Any, text: bool, gate: str) -> np.ndarray:
    """Per row, whether a string the walk of ``column`` reaches may hold a match."""
    flagged = np.zeros(frame.height, dtype=bool)
    indexed = frame.with_row_index(_ROW)
    for rows, hit in _hits(indexed, column, spec, text, gate):
        flagged[rows.filter(hit).to_numpy()] = True
    return flagged


def _hits(frame: pl.DataFrame, column: str, spec: Any, text: bool, gate: str):
    """(row index, may-count) series pairs for the values under ``column``: lists exploded,
    structs unnested (a text column only the fields its field map names)."""
    dtype = frame.schema[column]
    if isinstance(dtype, pl.Map):  # keys and values: a list of {key, value} structs
        yield from _hits(frame.with_columns(pl.col(column).map.entries()), column, spec, text, gate)
    elif isinstance(dtype, pl.List | pl.Array):
        yield from _hits(frame.explode(column), column, spec, text, gate)
    elif isinstance(dtype, pl.Struct):
        if text and not isinstance(spec, Mapping):  # a struct where the field map wants text: walk it
            yield frame[_ROW], frame[column].is_not_null()
            return
        names = [f.name for f in dtype.fields if not text or f.name in spec]
        fields = frame.select(_ROW, *(pl.col(column).struct.field(n).alias(f"{column}.{n}") for n in names))
        for name in names:
            yield from _hits(fields, f"{column}.{name}", spec[name] if text else None, text, gate)
    elif dtype == pl.String and not (text and isinstance(spec, Mapping)):
        values = frame[column]
        hit = values.str.contains(gate)
        if not text:
            hit = hit & ~values.str.contains(_PLAIN_ID)
        yield frame[_ROW], hit.fill_null(False)
    elif text and dtype != pl.Null:  # no string where the field map wants one (an integer may be a CPF)
        yield frame[_ROW], frame[column].is_not_null()
    # identifiers: numbers, flags and times never count


@dataclass(frozen=True)
class PatternResult:
    pattern: str
    passed: bool
    rows: int  # rows with at least one match
    matches: int


@dataclass
class ResidualReport:
    rows: int
    columns: list[str]
    results: list[PatternResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def counts(self) -> dict[str, int]:
        return {r.pattern: r.matches for r in self.results}

    def markdown(self) -> str:
        lines = ["| pattern | passed | rows | matches |", "|---|---|---|---|"]
        lines += [f"| {r.pattern} | {'yes' if r.passed else '**no**'} | {r.rows} | {r.matches} |" for r in self.results]
        return "\n".join(lines)


def residual_pii_check(
    data: pa.Table | pl.DataFrame, table: str, policy: Policy | None = None, patterns: Sequence[str] = PATTERNS
) -> ResidualReport:
    """``scan`` a table, then have Great Expectations check that every count is zero
    (one suite: a validator per expectation would fingerprint the batch each time).
    The report holds counts only."""
    import great_expectations as gx

    frame = data if isinstance(data, pl.DataFrame) else pl.from_arrow(data)
    found = scan(frame, table, policy, patterns)
    spec, identifiers = SCANNED[table]
    report = ResidualReport(rows=frame.height, columns=[c for c in frame.columns if c in spec or identifiers])
    if not frame.height:
        report.results = [PatternResult(p, True, 0, 0) for p in patterns]
        return report
    per_pattern = {p: np.zeros(frame.height, dtype=np.int64) for p in patterns}
    for at, counts in found.items():
        for p in patterns:
            per_pattern[p][at] = counts[p]
    counted = pl.DataFrame(per_pattern, schema=dict.fromkeys(patterns, pl.Int64))
    name = f"residual-{id(counted)}"
    expectations = [gx.expectations.ExpectColumnValuesToBeInSet(column=p, value_set=[0]) for p in patterns]
    with gx_batch(name, counted) as batch:
        suite = gx.ExpectationSuite(name=name, expectations=expectations)
        results = batch.validate(suite, result_format="BASIC").results
        for pattern, expectation, result in zip(patterns, suite.expectations, results, strict=True):
            if not same_rule(result.expectation_config, expectation.configuration):
                raise RuntimeError("residual PII: Great Expectations returned the suite's results out of order")
            rows = int((result.result or {}).get("unexpected_count") or 0)
            report.results.append(PatternResult(pattern, bool(result.success), rows, int(counted[pattern].sum())))
    return report
