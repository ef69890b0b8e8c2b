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

import json
import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import lru_cache
from itertools import accumulate, chain
from operator import itemgetter, methodcaller
from typing import Any

import numpy as np
import orjson
import regex

from pipelines.ingest.quality import gx_batch, same_rule
from pipelines.redact import check_digits, patterns
from pipelines.redact.email_domains import has_public_suffix, is_reserved
from pipelines.redact.field_rules import FieldInfo, FieldRules
from pipelines.redact.policy import Policy, load_policy
from pipelines.redact.row_fields import FIELDS, JSON, walk_row
from pipelines.redact.walker import MIN_NUMBER, JsonWalker

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
_API_KEY_HINT = regex.compile("|".join(regex.escape(h) for h in _API_KEY_HINTS))
MEMO_LIMIT = 200_000

_CPF = [regex.compile(patterns.CPF_FORMATTED), regex.compile(patterns.CPF_PLAIN)]
_CNPJ = [regex.compile(patterns.CNPJ_FORMATTED), regex.compile(patterns.CNPJ_PLAIN)]
_CARD = regex.compile(patterns.CARD)
# every form of patterns.CARD starts with four digits, an optional separator and four more
_CARD_START = regex.compile(r"\d{4}[ -]?\d{4}")
_CARD_FORMATTED = regex.compile(r"\d{4}[ -]\d{4}")  # and a formatted one has the separator
_API_KEYS = [patterns.compiled(p) for p in patterns.CREDENTIALS if p.name in API_KEY_PATTERNS]
# JSON escapes, nested ones too (\\n inside JSON inside JSON)
_ESCAPES = regex.compile(r'\\+(u[0-9a-fA-F]{4}|[nrtbf"/\\])?')
# a negative integer holding a card number: the card pattern wants no "-" before it
_NEGATIVE_CARD = regex.compile(r"-(\d{12,19})(?!\d)")
GATE_MEMO_LIMIT = 200_000
_ID_BLOCK = 256  # identifier strings judged together by the gate
# values of an identifier column whose strings are the values themselves
_SCALAR_TYPES = frozenset({str, int, float, bool, type(None), datetime, date})
# What some pattern of the scan needs in a text, as substring tests and two short
# searches (``may_match``): most distinct lines of a redacted table have none of them
# ("gh" alone is too common a substring: _GITHUB below searches for its tokens' prefix)
_KEY_LITERALS = tuple(hint for hint in _API_KEY_HINTS if hint != "gh")
_GITHUB = regex.compile(r"gh[pousr]_")
_CNPJ_SHAPE = regex.compile(r"[0-9A-Z]{2}\.[0-9A-Z]{3}\.[0-9A-Z]{3}/[0-9A-Z]{4}-")
# a CPF, a plain CNPJ, a card (4-4-4..., 4-6-4/5 or 12+ digits; a negative one too), as the patterns write them
_DIGIT_RUN = regex.compile(
    r"\d{3}\.\d{3}\.\d{3}-\d{2}|\d{9}-?\d{2}|\d{2}\.?\d{3}\.?\d{3}/?\d{4}-?\d{2}"
    r"|\d{4}[ -]?\d{4}[ -]?\d{4}|\d{4}[ -]?\d{6}"
)
# the same on ASCII text, 3x faster: [0-9] (which is \d there) and the two leading digits
# every alternative starts with taken out front
_ASCII_DIGIT_RUN = regex.compile(
    r"[0-9]{2}(?:[0-9]\.[0-9]{3}\.[0-9]{3}-[0-9]{2}|[0-9]{7}-?[0-9]{2}|\.?[0-9]{3}\.?[0-9]{3}/?[0-9]{4}-?[0-9]{2}"
    r"|[0-9]{2}[ -]?[0-9]{4}[ -]?[0-9]{4}|[0-9]{2}[ -]?[0-9]{6})"
)
# any of the literals as one search (stdlib re: faster than a substring test per literal)
_KEY_LITERAL = re.compile("|".join(re.escape(literal) for literal in _KEY_LITERALS))
# NUL joins strings (JSON escapes it); deleting these leaves nothing of plain ids
_PLAIN_ID_BYTES = b"abcdefghijklmnopqrstuvwxyz0123456789\x00"
_NUMBER_CHECKS = (
    ("cpf", check_digits.is_valid_cpf),
    ("cnpj", check_digits.is_valid_cnpj),
    ("card", check_digits.is_valid_card),
)


def may_match(text: str) -> bool:
    """False only when no pattern of the scan can match in ``text``: an email needs
    "@", an API key one of its literal prefixes, a formatted alphanumeric CNPJ its
    dots and slash, and a CPF, plain CNPJ or card eleven ASCII digits (the
    patterns' ``\\d`` also reads other scripts' digits: such a text is searched)
    and a run of them. Cheaper than running the patterns, and most lines fail it."""
    if "@" in text or _KEY_LITERAL.search(text) is not None:
        return True
    if "gh" in text and "_" in text and _GITHUB.search(text):
        return True
    if "/" in text and "-" in text and "." in text and _CNPJ_SHAPE.search(text):
        return True
    if not text.isascii():
        return _DIGIT_RUN.search(text) is not None
    if patterns.ascii_digits(text) >= 11:
        return _ASCII_DIGIT_RUN.search(text) is not None
    return False


# The readings of ``may_match_any_reading`` put a space where the raw text has a
# backslash, or a run of them with an escape letter or quote, and a slash where it has
# an escaped slash; every other character of a reading is the raw one. So one search of
# the raw text that also takes those runs where a space or slash can stand finds every
# reading's match, with no copy of the text.
_READ_AS_SPACE = r'(?: |\\+[nrtbf"]?)'
_READ_AS_SEPARATOR = r'(?:[ -]|\\+[nrtbf"]?)'
_READ_AS_SLASH = r"(?:/|\\+/)"


# the raw text's forms of a reading's ASCII digit run and CNPJ shape
_ESCAPED_DIGIT_RUN = regex.compile(
    _ASCII_DIGIT_RUN.pattern.replace("[ -]", _READ_AS_SEPARATOR).replace("/", _READ_AS_SLASH)
)
_ESCAPED_CNPJ_SHAPE = regex.compile(_CNPJ_SHAPE.pattern.replace("/", _READ_AS_SLASH))
_SLASH_ESCAPE = regex.compile(r"\\+/")
_OTHER_ESCAPE = regex.compile(r'\\+[nrtbf"]?')


def may_match_any_reading(value: str) -> bool:
    """False only when ``may_match`` fails on every reading ``_Counter.may_count``
    makes of any leaf of this text or JSON text (a leaf's reading is part of the
    whole value's): backslashes as literal characters, and as JSON escapes
    (``\\n`` a space, ``\\/`` a slash, nested escapes alike). A ``\\u``
    escape can stand for any character: such a value is judged leaf by leaf."""
    if "\\" not in value:
        return may_match(value)
    if "\\u" in value:
        return True
    # A reading drops only backslashes and the escape letter or quote after them and adds
    # only spaces and slashes: "@" and the keys' literals (none but "PRIVATE KEY" has a
    # space or slash) are in a reading exactly when in the raw text, and its ASCII digits
    # are the raw text's. Decided here for most escaped lines, without making the readings.
    if "@" in value or _KEY_LITERAL.search(value) is not None or ("gh" in value and _GITHUB.search(value)):
        return True
    if value.isascii() and "PRIVATE" not in value:
        # then a reading's CNPJ shape or digit run is one of the raw text's that may take an
        # escape where a space or slash stands: none of those, no match in any reading
        runs = patterns.ascii_digits(value) >= 11 and _ESCAPED_DIGIT_RUN.search(value) is not None
        if not runs and not ("/" in value and "-" in value and "." in value and _ESCAPED_CNPJ_SHAPE.search(value)):
            return False
    unescaped = _OTHER_ESCAPE.sub(" ", _SLASH_ESCAPE.sub("/", value))
    return may_match(value.replace("\\", " ")) or may_match(unescaped)


def _literal(text: str) -> str:
    return "".join("\\" + c if c in r".^$*+?()[]{}|\/" else c for c in text).replace(" ", _READ_AS_SPACE)


# Rust's regex reads ``\d`` as Unicode's decimal digits too, but from its own Unicode
# version: a code point it does not know yet (U+11DE0.. are digits to ``regex``) is taken as one
_ANY_DIGIT = r"[\d\p{Cn}]"
# ``may_match_any_reading`` as one pattern for polars (a test holds its digits to this
# module's ``\d``): true on every value where that is, and on values that merely come
# close (no digit count, both readings at once)
RAW_GATE = "|".join(
    [
        r"\\u",
        "@",
        *map(_literal, _KEY_LITERALS),
        _GITHUB.pattern,
        _ESCAPED_CNPJ_SHAPE.pattern,
        _DIGIT_RUN.pattern.replace("[ -]", _READ_AS_SEPARATOR).replace("/", _READ_AS_SLASH).replace(r"\d", _ANY_DIGIT),
    ]
)


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
        if not may_match(value):
            return
        value = patterns.with_ascii_digits(value)  # as the recognizers read it
        if "email" in self.wanted and "@" in value:
            for m in _email_pattern().finditer(value):
                if _is_personal_email(m.group()) and not self._allowed(m.group()):
                    self.counts["email"] += 1
        digits = patterns.ascii_digits(value)
        if digits >= 11:
            if "cpf" in self.wanted:
                found = {m.group() for p in _CPF for m in p.finditer(value)}
                self._count("cpf", found, check_digits.is_valid_cpf, structural)
            card_start = _CARD_FORMATTED if structural else _CARD_START
            if "card" in self.wanted and digits >= 12 and card_start.search(value):
                self._count("card", (m.group() for m in _CARD.finditer(value)), check_digits.is_valid_card, structural)
        if "cnpj" in self.wanted and digits >= 2:
            found = {m.group() for p in _CNPJ for m in p.finditer(value)}
            self._count("cnpj", found, check_digits.is_valid_cnpj, structural)
        if "api_key" in self.wanted and _API_KEY_HINT.search(value):
            for pattern in _API_KEYS:
                self.counts["api_key"] += sum(1 for m in pattern.finditer(value) if not self._allowed(m.group()))

    def may_count(self, column_value: str, structural: bool = False) -> bool:
        """False only when no leaf of this text or JSON text can count.

        The patterns run over the whole value as one text, without the
        allow list. A leaf's edges are quotes or JSON punctuation there,
        which the patterns treat like a text's edges, so every leaf's match
        is a match of the whole value, but for backslashes: read as JSON
        escapes (decoded, or a space: ``\\n`` before a CPF is a line break)
        or as literal characters (a Windows path in a plain text). Both
        readings are scanned; a value with no match in either is not walked.
        Most of a redacted table is such values. ``structural``: every leaf
        is structural (identifiers: bare digit runs do not count)."""
        texts = [column_value]
        if "\\" in column_value:
            texts = [_ESCAPES.sub(_unescaped, column_value), column_value.replace("\\", " ")]
        totals, allow, self.counts, self.allow = self.counts, self.allow, dict.fromkeys(self.wanted, 0), frozenset()
        try:
            for text in texts:
                self._text(text, structural)
                if "card" in self.wanted and "-" in text:
                    cards = (m.group(1) for m in _NEGATIVE_CARD.finditer(text))
                    self.counts["card"] += sum(map(check_digits.is_valid_card, cards))
            return any(self.counts.values())
        finally:
            self.counts, self.allow = totals, allow

    def may_count_number(self, value: int) -> bool:
        """Whether ``number`` could count this integer, under any key."""
        text = str(value)
        return any(name in self.wanted and valid(text) for name, valid in _NUMBER_CHECKS)

    def number(self, value: int, path: str, info: FieldInfo) -> None:
        # under id-like keys too: the redactor rewrites a validated CPF or card held as an integer anywhere
        text = str(value)
        for name, valid in _NUMBER_CHECKS:
            if name in self.wanted and valid(text):
                self.counts[name] += 1
                return


def _unescaped(match: regex.Match) -> str:
    escape = match.group(1)
    if escape and escape[0] == "u":
        code = int(escape[1:], 16)
        return " " if 0xD800 <= code <= 0xDFFF else chr(code)
    return "/" if escape == "/" else " "


class _CleanValues:
    """Which column values cannot count (``_Counter.may_count``), remembered
    over the rows of one scan. A JSON text is judged by its strings, so the
    system prompt in ``request_json`` is the one already judged in
    ``system_text``, and a message's text the one in ``messages``."""

    def __init__(self, counter: _Counter):
        self.counter = counter
        self._memo: dict[str, bool] = {}
        self._identifiers: dict[str, bool] = {}
        self._clean_ids: set[str] = set()  # the non-plain identifier strings judged clean
        self._line_gates: dict[str, bool] = {}  # line -> may_match_any_reading is false on it

    def skip(self, value: str, kind: str) -> bool:
        clean = self._memo.get(value)
        if clean is None:
            if self._lines_pass(value):
                clean = True  # no leaf of it can count: not parsed, not split
            else:
                clean = self._json_clean(value) if kind == JSON else self._text_clean(value)
            self._remember(value, clean)
        return clean

    def _lines_pass(self, value: str) -> bool:
        """``may_match_any_reading`` is false on every line of the value, each
        distinct line judged once per scan: a prompt is unique per call, its
        lines are not. A line ends at a line break or at its JSON escape
        ``\\n``: no pattern match holds either (none but a private key block
        spans a line, and none holds a backslash), so every match of a leaf,
        escaped or not, lies inside one line of the raw value."""
        if "PRIVATE KEY" in value:
            return not may_match_any_reading(value)
        if "\\n" in value:
            value = value.replace("\\n", "\n")
        if "\n" not in value:
            return not may_match_any_reading(value)
        gates = self._line_gates
        if len(gates) >= GATE_MEMO_LIMIT:
            gates.clear()
        for line in value.split("\n"):
            passed = gates.get(line)
            if passed is None:
                passed = gates[line] = not may_match_any_reading(line)
            if not passed:
                return False
        return True

    def _text_clean(self, value: str) -> bool:
        """Line by line: no pattern but a private key block spans a line break,
        and the lines of a prompt repeat far more than the prompt does."""
        clean = self._memo.get(value)
        if clean is not None:
            return clean
        if "\n" not in value or ("PRIVATE KEY" in value and "api_key" in self.counter.wanted):
            clean = not self.counter.may_count(value)
        else:
            clean = all(map(self._line_clean, value.split("\n")))
        self._remember(value, clean)
        return clean

    def _line_clean(self, line: str) -> bool:
        clean = self._memo.get(line)
        if clean is None:
            clean = not self.counter.may_count(line)
            self._remember(line, clean)
        return clean

    def identifier_rows_clean(
        self,
        rows: Sequence[Mapping[str, Any]],
        columns: Sequence[str],
        settled: Mapping[str, Any] | None = None,
    ) -> list[bool]:
        """``identifiers_clean`` of each row's values in ``columns``, judged column by
        column: a column's distinct strings once (a uri, a model, a service repeat
        in every row; a hash is one lower-case run), and only the rows holding a
        string not judged clean marked. The columns are taken out of the rows in
        one pass (one ``itemgetter`` per row, transposed), not one pass per column.
        ``settled``: column -> per row, True where that value was judged elsewhere to
        hold nothing that could count (``settled_cells``): only the other values are judged."""
        clean = [True] * len(rows)
        settled = settled or {}
        whole = [column for column in columns if column not in settled]
        judged: list[tuple[Sequence[int] | None, Sequence[Any]]] = [(None, v) for v in _column_values(rows, whole)]
        for column in columns:
            if column in settled:
                left = np.flatnonzero(~np.asarray(settled[column], dtype=bool)).tolist()
                if left:
                    judged.append((left, [rows[at].get(column) for at in left]))
        for at, values in judged:
            marked = self._unclean_positions(values)
            for i in marked:
                clean[i if at is None else at[i]] = False
        return clean

    def _unclean_positions(self, values: Sequence[Any]) -> list[int]:
        """The positions of ``values`` (one column's) that ``identifiers_clean`` does not judge clean."""
        strings = _unplain_strings(values)
        if strings is not None:  # scalars
            dirty = self._dirty_strings(self._escaped_strings(strings)) if strings else set()
            return [i for i, value in enumerate(values) if value in dirty] if dirty else []
        # nested values (lists of hashes, maps): the distinct strings of the whole column
        groups = _shallow_strings(values)
        if groups is not None:  # the strings of groups not all plain (a group of hashes is)
            judged = self._escaped_strings(chain.from_iterable(groups))
        else:
            judged = {string: string for string in set(_identifier_strings(values))}
        if not self._dirty_strings(judged):
            return []
        return [i for i, value in enumerate(values) if not self.identifiers_clean([value])]

    @staticmethod
    def _escaped_strings(values: Iterable[Any]) -> dict[str, str]:
        """The strings among distinct scalar values, each with the form
        ``_identifier_strings`` gives it (escaped as JSON where JSON escapes it)."""
        out: dict[str, str] = {}
        for value in values:
            if type(value) is str:
                out[value] = value
                if '"' in value or "\\" in value or not value.isprintable():
                    try:
                        out[value] = orjson.dumps(value).decode()[1:-1]
                    except orjson.JSONEncodeError:  # a lone surrogate: judged as it is
                        pass
        return out

    def _dirty_strings(self, strings: dict[str, str]) -> set[str]:
        """The keys of ``strings`` whose (escaped) form ``identifiers_clean`` would not judge clean."""
        # a string of letters and digits, lower-case or digits only, is clean (``identifiers_clean_string``)
        clean_ids = self._clean_ids
        left = [
            raw
            for raw, escaped in strings.items()
            if escaped not in clean_ids and not (escaped.isalnum() and (escaped.islower() or escaped.isdigit()))
        ]
        if not left:
            return set()
        escaped = [strings[raw] for raw in left]
        if _plain_ids(escaped):
            return set()
        # in blocks joined by NUL, which no gate's match can hold or cross: a block
        # ``may_match_any_reading`` rejects is clean at C speed, string by string otherwise
        dirty = set()
        for start in range(0, len(left), _ID_BLOCK):
            block = escaped[start : start + _ID_BLOCK]
            if may_match_any_reading("\x00".join(block)):
                raws = left[start : start + _ID_BLOCK]
                judged = zip(raws, block, strict=True)
                dirty.update(raw for raw, form in judged if not self.identifiers_clean_string(form))
        return dirty

    def identifiers_clean_string(self, value: str) -> bool:
        """One identifier string (escaped as JSON) judged as ``identifiers_clean`` judges it, once per scan."""
        if value.isalnum() and (value.islower() or value.isdigit()):
            return True
        memo = self._identifiers
        clean = memo.get(value)
        if clean is None:
            clean = not self.counter.may_count(value, structural=True)
            if len(memo) >= GATE_MEMO_LIMIT:
                memo.clear()
                self._clean_ids.clear()
            memo[value] = clean
            if clean:
                self._clean_ids.add(value)
        return clean

    def identifiers_clean(self, values: list[Any]) -> bool:
        """Columns read as identifiers (``_IdentifierCounter``): every string
        judged as structural, once per scan. A string of letters and digits
        with no capital (a hex hash, a bare number) cannot count there: a
        formatted number needs punctuation, an email "@", an API key "-", "_"
        or capitals."""
        strings = set(_identifier_strings(values))
        strings.difference_update(self._clean_ids)
        # left: hashes and ids, mostly. All of them lower-case letters and digits? (at C speed)
        if not "\x00".join(strings).encode("utf-8", "surrogatepass").translate(None, _PLAIN_ID_BYTES):
            return True
        return all(map(self.identifiers_clean_string, strings))

    def _remember(self, value: str, clean: bool) -> None:
        if len(self._memo) >= GATE_MEMO_LIMIT:
            self._memo.clear()
        self._memo[value] = clean

    def _json_clean(self, value: str) -> bool:
        try:
            orjson.loads(value)  # valid JSON: its leaves are its string and number tokens
        except orjson.JSONDecodeError:
            return self._json_clean_slowly(value)
        strings, numbers = _tokens(value)
        return all(map(self._text_clean, strings)) and not any(map(self.counter.may_count_number, numbers))

    def _json_clean_slowly(self, value: str) -> bool:
        """What orjson does not parse (NaN, integers over 64 bits) or no JSON at all."""
        try:
            parsed = json.loads(value)
        except ValueError:
            return not self.counter.may_count(value)
        strings: list[str] = []
        numbers: list[int] = []
        _strings(parsed, strings, numbers)
        return all(map(self._text_clean, strings)) and not any(map(self.counter.may_count_number, numbers))


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


def _strings(value: Any, out: list[str], numbers: list[int] | None = None) -> None:
    """Every string in a value (lists, tuples, dict values), in order; and the
    integers large enough to be an entity, when ``numbers`` is given."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, list | tuple):
        for item in value:
            _strings(item, out, numbers)
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, out, numbers)
    elif numbers is not None and isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MIN_NUMBER:
        numbers.append(value)


# In valid JSON: a string token (its escaped text), an integer token of eight digits or more
_JSON_STRING = regex.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"')
_JSON_LONG_INT = regex.compile(r"(?<![\d.eE+-])-?\d{8,}(?![.eE\d])")
_EIGHT_DIGITS = regex.compile(r"\d{8}")


def _tokens(json_text: str) -> tuple[list[str], list[int]]:
    """The string tokens (escaped: ``may_count`` reads escapes) and the integers
    of at least eight digits (smaller ones cannot be an entity) of valid JSON."""
    if '\\"' in json_text:
        strings = _JSON_STRING.findall(json_text)
        outside = _JSON_STRING.sub(" ", json_text)
    else:  # no escaped quote: every quote opens or closes a string
        parts = json_text.split('"')
        strings, outside = parts[1::2], " ".join(parts[0::2])
    numbers = [int(n) for n in _JSON_LONG_INT.findall(outside)] if _EIGHT_DIGITS.search(outside) else []
    return strings, numbers


# Letters, digits and "_" alone: an identifier string of these can count only as a
# GitHub or Stripe key (the other patterns need "@", "-", ".", "/", a space or a capital)
_WORD_ID_BYTES = _PLAIN_ID_BYTES + b"_"
_WORD_ID_KEYS = regex.compile(r"gh[pousr]_|github_pat_|_live_|_test_")


def _plain_ids(strings: Iterable[str]) -> bool:
    """True when no identifier string here can count, judged at C speed: all of
    them lower-case letters and digits, or also "_" but no GitHub or Stripe key prefix."""
    data = "\x00".join(strings).encode("utf-8", "surrogatepass")
    rest = data.translate(None, _PLAIN_ID_BYTES)
    if not rest:
        return True
    return not rest.translate(None, b"_") and _WORD_ID_KEYS.search(data.decode()) is None


def _column_values(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[Sequence[Any]]:
    """Each column's values over ``rows`` (None where a row lacks it), in row order."""
    if not columns or not rows:
        return [[None] * len(rows) for _ in columns]
    if len(columns) == 1:
        return [[row.get(columns[0]) for row in rows]]
    take = itemgetter(*columns)
    try:
        taken = list(map(take, rows))
    except KeyError:
        taken = [tuple(row.get(column) for column in columns) for row in rows]
    return list(zip(*taken, strict=True))


_LIST_KINDS = frozenset({list, tuple, type(None)})
_DICT_KIND = frozenset({dict})
_DICT_KINDS = frozenset({dict, type(None)})
_STR_KIND = frozenset({str})
_STR_KINDS = frozenset({str, type(None)})


# dicts with up to this many distinct keys have the values under each key gathered on their own
_KEY_GROUPS = 16


def _shallow_strings(values: list[Any]) -> list[list[str]] | None:
    """The distinct strings (dict keys too) of values that are scalars, dicts of
    scalars, or lists of scalars or of such dicts, gathered by set updates instead
    of ``orjson.dumps`` and a split (a day's ``block_hashes`` hold two million
    strings), in groups: the keys, and for dicts with few keys the values under
    each key apart (the hashes under "sha256", the names under "block"), so that
    a group of hashes is judged plain at C speed whatever the other keys hold
    (``_unplain_strings`` of each group: none of a plain one);
    None when a value is deeper than that or a key is not a string."""
    found: set[Any] = set()
    keys: set[Any] = set()
    groups: list[Collection[Any]] = [found]
    try:
        kinds = set(map(type, values))
        items = None
        if kinds <= _LIST_KINDS:
            items = list(chain.from_iterable(filter(None, values)))
        elif kinds <= _DICT_KINDS:  # dicts of scalars (usage, params, segment)
            items = list(filter(None, values))
        if items is not None and set(map(type, items)) <= _DICT_KIND:  # dicts, or lists of them: all at C speed
            groups = _key_groups(items, keys)
            if groups is None:
                found.update(chain.from_iterable(map(dict.values, items)))
                groups = [found]
            values = []
        for value in values:
            kind = type(value)
            if kind is dict:
                keys.update(value)
                found.update(value.values())
            elif kind is list or kind is tuple:
                for item in value:
                    if type(item) is dict:
                        keys.update(item)
                        found.update(item.values())
                    else:
                        found.add(item)
            else:
                found.add(value)
    except TypeError:  # a list or dict inside: deeper than this reads
        return None
    if not set(map(type, keys)) <= _STR_KIND:
        return None
    out = [[] if _plain_ids(keys) else list(keys)]
    for group in groups:
        strings = _unplain_strings(group)
        if strings is None:
            return None
        out.append(strings)
    return out


def _unplain_strings(values: Collection[Any]) -> list[str] | None:
    """The distinct strings among scalar values; none when all of them are plain
    (``_plain_ids``: hashes, ids), which is judged at C speed before any is hashed
    into a set; None when a value is no scalar (a list, a dict). Timestamps,
    numbers and flags hold no string."""
    kinds = set(map(type, values))
    if not kinds <= _SCALAR_TYPES:
        return None
    if str not in kinds:
        return []
    if kinds <= _STR_KIND:
        strings = values
    elif kinds <= _STR_KINDS:
        strings = list(filter(None, values))  # drops "" too: it holds nothing to count
    else:
        strings = [value for value in values if type(value) is str]
    return [] if _plain_ids(strings) else list(set(strings))


def _key_groups(items: list[dict[Any, Any]], keys: set[Any]) -> list[Collection[Any]] | None:
    """For dicts with at most ``_KEY_GROUPS`` keys, the values under each key
    (``keys`` gets the keys); None for more keys. When every dict has the first
    one's keys (the same size, and each holds them all: a day's block hashes, usage,
    params), one ``itemgetter`` pass takes them all, else one ``dict.get`` pass per key."""
    if not items:
        return []
    first = items[0]
    if not first and not any(items):  # empty dicts only
        return []
    if first and len(first) <= _KEY_GROUPS and set(map(len, items)) == {len(first)}:
        try:
            take = itemgetter(*first)
            groups = list(zip(*map(take, items), strict=True)) if len(first) > 1 else [list(map(take, items))]
        except KeyError:  # a dict without one of them: other keys
            pass
        else:
            keys.update(first)
            return groups
    keys.update(chain.from_iterable(items))
    if len(keys) > _KEY_GROUPS:
        return None
    return [set(map(methodcaller("get", key), items)) for key in keys]


def _no_value(value: Any) -> None:
    return None  # a timestamp or date is no identifier


def _identifier_strings(values: list[Any]) -> list[str]:
    """Every string in these values (dict keys too), escaped as JSON, at C speed."""
    try:
        text = orjson.dumps(values, default=_no_value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME)
    except TypeError:
        strings: list[str] = []
        _strings(values, strings)
        return strings
    text = text.decode()
    # no escaped quote: every quote opens or closes a string
    return _JSON_STRING.findall(text) if '\\"' in text else text.split('"')[1::2]


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
    *,
    walk_all: bool = False,
) -> tuple[list[dict[str, int]], list[str]]:
    """Per-row match counts for each pattern, and the columns scanned.

    ``table`` "calls" or "spans" scans that table's text-bearing columns
    (``columns`` narrows them); for any other table give ``columns``.
    On a polars frame only the cells (row and column) ``residual_prefilter.candidate_cells``
    marks are walked (the others count zero everywhere), and in them a
    value whose lines no pattern can match in is not walked leaf by leaf;
    ``walk_all``: walk every leaf of every row (the same counts, slower).
    """
    height, walked, scanned = _walked_counts(frame, table, columns, policy, patterns, walk_all)
    return [walked.get(at) or dict.fromkeys(patterns, 0) for at in range(height)], scanned


def _walked_counts(
    frame: Any,
    table: str | None,
    columns: Sequence[str] | None,
    policy: Policy | None,
    patterns: Sequence[str],
    walk_all: bool,
) -> tuple[int, dict[int, dict[str, int]], list[str]]:
    """``residual_counts`` as the frame's row count, the counts of the rows walked
    (by position; every other row counts zero) and the columns scanned."""
    policy = policy or load_policy()
    walker = JsonWalker(FieldRules(policy))
    allow = frozenset(v.casefold() for v in policy.allow_list)
    present = set(_column_names(frame))
    spec: Mapping[str, Any] = FIELDS.get(table or "", {})
    scanned = [c for c in (columns or list(spec)) if c in present]
    if not scanned:
        raise ValueError(f"no text columns to scan: give columns= (table {table!r}, frame has {sorted(present)})")
    wanted = tuple(patterns)
    memo: dict | None = None if walk_all else {}
    skip = None if walk_all else _CleanValues(_Counter(wanted, allow)).skip
    public = policy.is_public_document if policy.public_documents else None

    def count(row: dict[str, Any]) -> dict[str, int]:
        counter = _Counter(wanted, allow, memo)
        if table in FIELDS:
            walk_row(row, table, walker, counter, public, skip)
        else:
            for column in scanned:
                walker.walk(row.get(column), column, counter)
        return counter.counts

    if walk_all or not hasattr(frame, "to_dicts"):
        rows = _records(frame, scanned)
        return len(rows), {at: count(row) for at, row in enumerate(rows)}, scanned
    from pipelines.redact.residual_prefilter import candidate_cells

    # only the marked columns of the marked rows are converted to Python and walked
    marked: dict[int, dict[str, Any]] = defaultdict(dict)
    for column, cells in candidate_cells(frame, spec if table in FIELDS else None, scanned, RAW_GATE).items():
        rows = cells.nonzero()[0]
        for at, value in zip(rows.tolist(), frame[column].gather(rows).to_list(), strict=True):
            marked[at][column] = value
    return frame.height, {at: count(row) for at, row in marked.items()}, scanned


TEXT_COLUMNS = "text"
IDENTIFIER_COLUMNS = "identifiers"


class TextScreen:
    """``row_residuals(..., part=TEXT_COLUMNS)`` over the column values a walk
    that visits every one of them already kept: the redactor's apply pass
    keeps each text column value as it wrote it (``row_fields.walk_row(inspect=...)``),
    so the screen needs no walk of its own over the rows. Values are judged as
    ``row_residuals`` judges them: one whose lines no pattern can match in is
    not walked, the others leaf by leaf."""

    def __init__(self, policy: Policy, patterns: Sequence[str] = PATTERNS):
        self.patterns = tuple(patterns)
        self.walker = JsonWalker(FieldRules(policy))
        self.allow = frozenset(v.casefold() for v in policy.allow_list)
        self.memo: dict = {}
        self.clean = _CleanValues(_Counter(self.patterns, self.allow))

    def row(self, written: Iterable[tuple[str, str, str]]) -> tuple[str, ...]:
        """The classes found in one row's text column values ((value, TEXT | JSON, path) each)."""
        counter = None
        judged, skip = self.clean._memo.get, self.clean.skip  # most values were judged clean already
        for value, kind, path in written:
            if judged(value) or skip(value, kind):
                continue
            if counter is None:
                counter = _Counter(self.patterns, self.allow, self.memo)
            if kind == JSON:
                self.walker.walk_json_text(value, path, counter)
            else:
                self.walker.walk(value, path, counter)
        return () if counter is None else tuple(p for p in self.patterns if counter.counts[p])

    def rows(self, written: Iterable[Iterable[tuple[str, str, str]] | None]) -> list[tuple[str, ...]]:
        """``row`` of each row, with every value searched first in one polars call:
        a value ``RAW_GATE`` finds nothing in is one ``may_match_any_reading`` is
        false on, and so on each of its lines (a line is part of the raw value):
        ``row`` would pass over it. Only the others are judged in Python."""
        import polars as pl

        rows = [values or () for values in written]
        items = list(chain.from_iterable(rows))
        found = pl.Series(list(map(itemgetter(0), items)), dtype=pl.String)
        # most values hold nothing the gate finds: only the flagged ones are handled in Python
        ends = list(accumulate(map(len, rows)))
        flagged: dict[int, list[tuple[str, str, str]]] = defaultdict(list)
        for at in found.str.contains(RAW_GATE).arg_true().to_list():
            flagged[bisect_right(ends, at)].append(items[at])
        out: list[tuple[str, ...]] = [()] * len(rows)
        for row, values in flagged.items():
            out[row] = self.row(values)
        return out


def _identifier_values(rows: Sequence[Mapping[str, Any]], text_columns: Mapping[str, Any]) -> list[Any]:
    """Per row, the values of its columns outside ``text_columns`` (None where a
    row lacks one): taken by one ``itemgetter`` over the columns of all rows."""
    columns = sorted(set().union(*rows).difference(text_columns), key=str)
    if not columns:
        return [()] * len(rows)
    take = itemgetter(*columns) if len(columns) > 1 else lambda row: (row[columns[0]],)
    out = []
    for row in rows:
        try:
            out.append(take(row))
        except KeyError:
            out.append(tuple(row.get(column) for column in columns))
    return out


def row_residuals(
    rows: Sequence[Mapping[str, Any]],
    table: str,
    policy: Policy,
    patterns: Sequence[str] = PATTERNS,
    *,
    walk_all: bool = False,
    part: str | None = None,
) -> list[tuple[str, ...]]:
    """For each row, the pattern classes found in ANY of its text (the redactor's
    text columns, and every other column read as identifiers); () when clean.
    The pre-write screen of ingest: a row with a class is quarantined, not written.
    Values in which no pattern matches at all are not walked leaf by leaf
    (``walk_all``: walk them anyway; the same result, slower). ``part``
    ``TEXT_COLUMNS`` or ``IDENTIFIER_COLUMNS`` scans only those columns (the
    redactor's workers scan the text columns of the rows they redacted):
    ``merge_residuals`` of the two parts is the whole row's result."""
    return RowScreen(policy, patterns).residuals(rows, table, walk_all=walk_all, part=part)


class RowScreen:
    """``row_residuals`` over many batches of rows (the shards of one redaction):
    what it judged of one batch's values (a model, a service, a session id, a
    prompt's lines repeat from shard to shard) is kept for the next. Judgements
    depend on the value alone, so the classes found are ``row_residuals``' of each batch."""

    def __init__(self, policy: Policy, patterns: Sequence[str] = PATTERNS):
        self.policy = policy
        self.patterns = tuple(patterns)
        self.walker = JsonWalker(FieldRules(policy))
        self.allow = frozenset(v.casefold() for v in policy.allow_list)
        self.public = policy.is_public_document if policy.public_documents else None
        self.memo: dict = {}
        self.clean = _CleanValues(_Counter(self.patterns, self.allow))

    def residuals(
        self,
        rows: Sequence[Mapping[str, Any]],
        table: str,
        *,
        walk_all: bool = False,
        part: str | None = None,
        settled: Mapping[str, Any] | None = None,
    ) -> list[tuple[str, ...]]:
        """``row_residuals(rows, table, ...)`` with this screen's patterns and policy.
        ``settled``: identifier column -> per row, True where its value is known to hold
        nothing that could count (``settled_cells`` of the same values): those are not judged again."""
        patterns, allow, walker, memo, clean = self.patterns, self.allow, self.walker, self.memo, self.clean
        spec = FIELDS.get(table, {}) if part != IDENTIFIER_COLUMNS else {}
        not_text = FIELDS.get(table, {})
        found = []
        skip = None if walk_all else clean.skip
        ids: list[Any] = []
        clean_ids: list[bool] = []
        if part != TEXT_COLUMNS:
            if walk_all:
                ids = _identifier_values(rows, not_text)
                clean_ids = [False] * len(rows)
            else:
                columns = sorted(set().union(*rows).difference(not_text), key=str)
                clean_ids = clean.identifier_rows_clean(rows, columns, settled)
                if not spec and all(clean_ids):  # identifier columns only, none can count
                    return [()] * len(rows)
        for i, row in enumerate(rows):
            if not spec and part != TEXT_COLUMNS and clean_ids[i]:  # identifier columns only, none can count
                found.append(())
                continue
            counter = _Counter(patterns, allow, memo)
            if spec:
                walk_row(row if isinstance(row, dict) else dict(row), table, walker, counter, self.public, skip)
            if part != TEXT_COLUMNS:
                if not clean_ids[i] and (not walk_all or any(value is not None for value in ids[i])):
                    others = _IdentifierCounter(counter)
                    for column, value in row.items():
                        if column not in not_text and value is not None:
                            walker.walk(_as_json(value), column, others)
            found.append(tuple(p for p in patterns if counter.counts[p]))
        return found

    def settled_column(self, values: Sequence[Any]) -> Any:
        """One identifier column's values (in row order) -> per row, True where
        ``residuals(part=IDENTIFIER_COLUMNS)`` finds nothing to count in the value:
        the ``settled`` cells of that column, judged where the values are made."""
        settled = np.ones(len(values), dtype=bool)
        settled[self.clean._unclean_positions(values)] = False
        return settled


# An identifier string nothing can count in, as Rust's regex tells it: lower-case letters and
# digits only (``identifiers_clean_string`` judges those clean before anything), or a string
# with nothing ``RAW_GATE`` finds and nothing JSON escapes (the screen judges a string's JSON
# escaped form; without escapes that is the string, and ``may_match_any_reading`` is false on it)
_SETTLED_PLAIN = r"^[a-z0-9]*$"
_UNSETTLED = RAW_GATE + r'|["\\\x00-\x1f]'


def settled_cells(record_batch: Any, columns: Iterable[str]) -> dict[str, Any]:
    """Column -> per row (a numpy bool array), True where the identifier screen
    (``RowScreen.residuals(part=IDENTIFIER_COLUMNS)``) would find nothing to count in
    the value, judged on Arrow by polars (on every core, without the GIL) instead of
    in Python over row dicts. Only columns whose values the
    screen reads as Arrow holds them: strings and lists of strings (judged), and
    numbers, flags, dates and timestamps (no string: pyarrow refuses one for them,
    and typed numbers do not count in identifiers). Structs and maps are left out: a
    row dict may hold keys their Arrow type drops."""
    import polars as pl
    import pyarrow as pa

    out: dict[str, Any] = {}
    strings, lists = [], []
    for name in columns:
        kind = record_batch.schema.field(name).type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            strings.append(name)
        elif (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and (
            pa.types.is_string(kind.value_type) or pa.types.is_large_string(kind.value_type)
        ):
            lists.append(name)
        elif any(is_kind(kind) for is_kind in (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean)) or (
            pa.types.is_temporal(kind)
        ):
            out[name] = np.ones(record_batch.num_rows, dtype=bool)
    if not strings and not lists:
        return out
    frame = pl.from_arrow(record_batch.select(strings + lists))
    # plain ids first (most of the bytes: hashes, ids), the gate only on the other values
    plain = [pl.col(name).str.contains(_SETTLED_PLAIN).fill_null(True) for name in strings]
    element = (pl.element().str.contains(_SETTLED_PLAIN) | ~pl.element().str.contains(_UNSETTLED)).fill_null(True)
    listed = [pl.col(name).list.eval(element).list.all().fill_null(True) for name in lists]
    for name, settled in zip(strings + lists, frame.select(plain + listed), strict=True):
        cells = settled.to_numpy().copy()
        if name in strings and not cells.all():
            left = np.flatnonzero(~cells)
            cells[left] = ~frame[name].gather(left).str.contains(_UNSETTLED).to_numpy()
        out[name] = cells
    return out


def merge_residuals(
    first: Sequence[tuple[str, ...]], second: Sequence[tuple[str, ...]], patterns: Sequence[str] = PATTERNS
) -> list[tuple[str, ...]]:
    """Row by row, the classes found in either part, in ``patterns`` order."""
    return [
        a if not b else b if not a else tuple(p for p in patterns if p in a or p in b)
        for a, b in zip(first, second, strict=True)
    ]


def residual_pii_check(
    frame: Any,
    table: str | None = None,
    columns: Sequence[str] | None = None,
    policy: Policy | None = None,
    patterns: Sequence[str] = PATTERNS,
) -> ResidualReport:
    """Scan a table's text columns for residual PII; passes when nothing is found.

    The per-pattern expectations are validated as one suite, in one call: Great
    Expectations builds a validator (and fingerprints the batch) per call, and five
    calls cost about three times one."""
    import great_expectations as gx
    import polars as pl

    height, walked, scanned = _walked_counts(frame, table, columns, policy, patterns, walk_all=False)
    report = ResidualReport(rows=height, columns=scanned)
    if not height:
        report.results = [PatternResult(p, True, 0, 0) for p in patterns]
        return report
    # the counts per row as columns: zeros but where a row was walked (the scan's counts)
    at = np.fromiter(walked, dtype=np.int64, count=len(walked))
    per_pattern = {}
    for p in patterns:
        per_pattern[p] = np.zeros(height, dtype=np.int64)
        per_pattern[p][at] = np.fromiter((row[p] for row in walked.values()), dtype=np.int64, count=len(walked))
    data = pl.DataFrame(per_pattern, schema=dict.fromkeys(patterns, pl.Int64))
    name = f"residual-{id(data)}"
    expectations = [gx.expectations.ExpectColumnValuesToBeInSet(column=p, value_set=[0]) for p in patterns]
    with gx_batch(name, data) as batch:
        suite = gx.ExpectationSuite(name=name, expectations=expectations)
        results = batch.validate(suite, result_format="BASIC").results
        for pattern, expectation, result in zip(patterns, suite.expectations, results, strict=True):
            if not same_rule(result.expectation_config, expectation.configuration):
                raise RuntimeError("residual PII: Great Expectations returned the suite's results out of order")
            rows = int((result.result or {}).get("unexpected_count") or 0)
            report.results.append(PatternResult(pattern, bool(result.success), rows, int(data[pattern].sum())))
    return report
