"""The residual-PII scan: did anything the redactor must catch get through?

It walks the text columns of a table the way the redactor does (same field
rules: public fields skipped, ids checked only for unambiguous patterns) and
counts, per row, matches of patterns that need no judgement: emails outside
the reserved ``example.*`` domains, CPFs and CNPJs with valid check digits,
Luhn-valid card numbers, and API keys. The per-row counts, never the
matches, go to Great Expectations, which checks that every count is zero.
The report carries counts only.

Synthetic mode writes valid-looking CPFs, CNPJs and cards on purpose: scan
its tables with ``patterns=patterns_for_mode("synthetic")``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import regex

from pipelines.quality import gx_source
from pipelines.redact import check_digits, patterns
from pipelines.redact.email_domains import has_public_suffix, is_reserved
from pipelines.redact.field_rules import FieldInfo, FieldRules
from pipelines.redact.policy import Policy, load_policy
from pipelines.redact.row_fields import FIELDS, walk_row
from pipelines.redact.walker import JsonWalker

PATTERNS = ("email", "cpf", "cnpj", "card", "api_key")
API_KEY_PATTERNS = (
    "anthropic_api_key",
    "openai_api_key",
    "aws_access_key_id",
    "github_token",
    "slack_token",
    "google_api_key",
    "stripe_key",
    "jwt",
    "private_key",
)
_API_KEY_HINTS = (
    "sk-",
    "AKIA",
    "ASIA",
    "ABIA",
    "ACCA",
    "gh",
    "github_pat_",
    "xox",
    "AIza",
    "_live_",
    "_test_",
    "eyJ",
    "PRIVATE KEY",
)
_DIGITS = str.maketrans("", "", "0123456789")
_API_KEY_HINT = regex.compile("|".join(regex.escape(h) for h in _API_KEY_HINTS))
MEMO_LIMIT = 200_000

_CPF = [regex.compile(patterns.CPF_FORMATTED), regex.compile(patterns.CPF_PLAIN)]
_CNPJ = [regex.compile(patterns.CNPJ_FORMATTED), regex.compile(patterns.CNPJ_PLAIN)]
_CARD = regex.compile(patterns.CARD)
_API_KEYS = [patterns.compiled(p) for p in patterns.CREDENTIALS if p.name in API_KEY_PATTERNS]


def patterns_for_mode(mode: str) -> tuple[str, ...]:
    """Synthetic values pass their check digits by design; the other patterns still apply."""
    return ("email", "api_key") if mode == "synthetic" else PATTERNS


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


@lru_cache(maxsize=1)
def _email_pattern() -> regex.Pattern:
    """presidio's own email pattern: the scan must not flag what the redactor could not match."""
    from presidio_analyzer.predefined_recognizers import EmailRecognizer

    return regex.compile(EmailRecognizer.PATTERNS[0].regex, regex.IGNORECASE | regex.DOTALL | regex.MULTILINE)


def _is_personal_email(found: str) -> bool:
    return not is_reserved(found) and has_public_suffix(found)


class _Counter:
    """A walker visitor that counts pattern matches in the leaves of one row."""

    def __init__(self, wanted: tuple[str, ...], allow: frozenset[str], memo: dict | None = None):
        self.wanted = wanted
        self.allow = allow
        self.counts = dict.fromkeys(wanted, 0)
        # (leaf, structural) -> its counts, shared across the rows of one scan: ids,
        # model names, prompts and tool definitions repeat in every row
        self.memo = memo

    def text(self, value: str, path: str, info: FieldInfo) -> None:
        if self.memo is None:
            self._text(value, info.structural)
            return
        key = (value, info.structural)
        found = self.memo.get(key)
        if found is None:
            totals, self.counts = self.counts, dict.fromkeys(self.wanted, 0)
            self._text(value, info.structural)
            found, self.counts = tuple(self.counts.items()), totals
            if len(self.memo) < MEMO_LIMIT:
                self.memo[key] = found
        for name, n in found:
            self.counts[name] += n

    def _allowed(self, found: str) -> bool:
        return found.casefold() in self.allow

    def _count(self, name: str, found: Iterable[str], valid: Callable[[str], bool], formatted_only: bool) -> None:
        for value in found:
            if formatted_only and value.isalnum():
                continue
            if valid(value) and not self._allowed(value):
                self.counts[name] += 1

    def _text(self, value: str, structural: bool) -> None:
        if "email" in self.wanted and "@" in value:
            for m in _email_pattern().finditer(value):
                if _is_personal_email(m.group()) and not self._allowed(m.group()):
                    self.counts["email"] += 1
        digits = len(value) - len(value.translate(_DIGITS))
        if digits >= 11:
            if "cpf" in self.wanted:
                found = {m.group() for p in _CPF for m in p.finditer(value)}
                self._count("cpf", found, check_digits.is_valid_cpf, structural)
            if "card" in self.wanted and digits >= 12:
                self._count("card", (m.group() for m in _CARD.finditer(value)), check_digits.is_valid_card, structural)
        if "cnpj" in self.wanted and digits >= 2:
            found = {m.group() for p in _CNPJ for m in p.finditer(value)}
            self._count("cnpj", found, check_digits.is_valid_cnpj, structural)
        if "api_key" in self.wanted and _API_KEY_HINT.search(value):
            for pattern in _API_KEYS:
                self.counts["api_key"] += sum(1 for m in pattern.finditer(value) if not self._allowed(m.group()))

    def number(self, value: int, path: str, info: FieldInfo) -> None:
        # under id-like keys too: the redactor rewrites a validated CPF or card held as an integer anywhere
        text = str(value)
        for name, valid in (("cpf", check_digits.is_valid_cpf), ("cnpj", check_digits.is_valid_cnpj),
                            ("card", check_digits.is_valid_card)):  # fmt: skip
            if name in self.wanted and valid(text):
                self.counts[name] += 1
                return


class _IdentifierCounter:
    """Columns outside the redactor's field map (ids, uris, tags, segment, names):
    looked at as identifiers, so a bare digit run (a hash, an etag) counts only
    when formatted, and typed numbers (tokens, offsets) not at all."""

    def __init__(self, counter: _Counter):
        self.counter = counter

    def text(self, value: str, path: str, info: FieldInfo) -> None:
        self.counter.text(value, path, _IDENTIFIER)

    def number(self, value: int, path: str, info: FieldInfo) -> None:
        return None


_IDENTIFIER = FieldInfo(structural=True)


def _as_json(value: Any) -> Any:
    """Map columns come as lists of (key, value) pairs: lists and dicts for the walker."""
    if isinstance(value, tuple):
        return [_as_json(v) for v in value]
    if isinstance(value, list):
        return [_as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    return value


def _records(frame: Any, columns: Sequence[str]) -> list[dict[str, Any]]:
    if isinstance(frame, list):
        return [{c: row.get(c) for c in columns} for row in frame]
    if hasattr(frame, "to_dicts"):  # polars
        return frame.select([c for c in columns if c in frame.columns]).to_dicts()
    return frame[[c for c in columns if c in frame.columns]].to_dict("records")  # pandas


def _column_names(frame: Any) -> list[str]:
    if isinstance(frame, list):
        return sorted({k for row in frame for k in row})
    return list(frame.columns)


def residual_counts(
    frame: Any,
    table: str | None = None,
    columns: Sequence[str] | None = None,
    policy: Policy | None = None,
    patterns: Sequence[str] = PATTERNS,
) -> tuple[list[dict[str, int]], list[str]]:
    """Per-row match counts for each pattern, and the columns scanned.

    ``table`` "calls" or "spans" scans that table's text-bearing columns
    (``columns`` narrows them); for any other table give ``columns``.
    """
    policy = policy or load_policy()
    walker = JsonWalker(FieldRules(policy))
    allow = frozenset(v.casefold() for v in policy.allow_list)
    present = set(_column_names(frame))
    spec: Mapping[str, Any] = FIELDS.get(table or "", {})
    scanned = [c for c in (columns or list(spec)) if c in present]
    if not scanned:
        raise ValueError(f"no text columns to scan: give columns= (table {table!r}, frame has {sorted(present)})")
    counts = []
    memo: dict = {}
    for row in _records(frame, scanned):
        counter = _Counter(tuple(patterns), allow, memo)
        if table in FIELDS:
            walk_row(row, table, walker, counter, policy.is_public_document if policy.public_documents else None)
        else:
            for column in scanned:
                walker.walk(row.get(column), column, counter)
        counts.append(counter.counts)
    return counts, scanned


def row_residuals(
    rows: Sequence[Mapping[str, Any]], table: str, policy: Policy, patterns: Sequence[str] = PATTERNS
) -> list[tuple[str, ...]]:
    """For each row, the pattern classes found in ANY of its text (the redactor's
    text columns, and every other column read as identifiers); () when clean.
    The pre-write screen of ingest: a row with a class is quarantined, not written."""
    walker = JsonWalker(FieldRules(policy))
    allow = frozenset(v.casefold() for v in policy.allow_list)
    spec = FIELDS.get(table, {})
    public = policy.is_public_document if policy.public_documents else None
    found = []
    memo: dict = {}
    for row in rows:
        counter = _Counter(tuple(patterns), allow, memo)
        if spec:
            walk_row(dict(row), table, walker, counter, public)
        others = _IdentifierCounter(counter)
        for column, value in row.items():
            if column not in spec and value is not None:
                walker.walk(_as_json(value), column, others)
        found.append(tuple(p for p in patterns if counter.counts[p]))
    return found


def residual_pii_check(
    frame: Any,
    table: str | None = None,
    columns: Sequence[str] | None = None,
    policy: Policy | None = None,
    patterns: Sequence[str] = PATTERNS,
) -> ResidualReport:
    """Scan a table's text columns for residual PII; passes when nothing is found."""
    import great_expectations as gx
    import pandas as pd

    counts, scanned = residual_counts(frame, table, columns, policy, patterns)
    report = ResidualReport(rows=len(counts), columns=scanned)
    if not counts:
        report.results = [PatternResult(p, True, 0, 0) for p in patterns]
        return report
    data = pd.DataFrame(counts, columns=list(patterns))
    source = gx_source()
    name = f"residual-{id(data)}"
    batch = (
        source.add_dataframe_asset(name=name)
        .add_batch_definition_whole_dataframe("all")
        .get_batch(batch_parameters={"dataframe": data})
    )
    try:
        for pattern in patterns:
            result = batch.validate(
                gx.expectations.ExpectColumnValuesToBeInSet(column=pattern, value_set=[0]), result_format="BASIC"
            )
            rows = int((result.result or {}).get("unexpected_count") or 0)
            report.results.append(PatternResult(pattern, bool(result.success), rows, int(data[pattern].sum())))
    finally:
        source.delete_asset(name)
    return report
