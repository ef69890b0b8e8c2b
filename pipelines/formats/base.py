"""What every format module takes and returns.

A format module is a pure function ``normalize(data, source) -> Normalized``:
decompressed object bytes in, canonical rows out, plus one ``Problem`` per
record it could not turn into rows. Problems never quote the record: it may
hold PII. They say where it is and what was expected.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Protocol, TypeVar

import orjson
import pydantic

# A line longer than this is quarantined rather than parsed: one runaway
# record must not take a worker's memory with it.
MAX_RECORD_BYTES = 8 * 1024 * 1024
M = TypeVar("M", bound=pydantic.BaseModel)


@dataclass(frozen=True)
class SourceRef:
    """Where the bytes came from."""

    uri: str
    key: str
    etag: str


@dataclass(frozen=True)
class Problem:
    """A record (line set) or the whole object (line None) that could not be ingested."""

    error_class: str
    message: str
    line: int | None = None
    byte_offset: int | None = None

    @property
    def scope(self) -> str:
        return "object" if self.line is None else "record"


@dataclass(frozen=True)
class Fragment:
    """A piece of a call that can sit in another object than the call's span:
    log events carrying its content, a tool execution or retrieval around it,
    feedback on it. The batch assembly (formats/assembly.py) joins fragments
    onto their calls; what finds no call in the batch is matched against the
    calls already in the warehouse.

    ``kind`` is content | tool_execution | retrieval | feedback. ``span_id``
    names the target call's span (content, feedback); it is None for
    trace-level feedback and for tool executions and retrievals, which are
    placed by ``parent_span_id``, time and tool call id.
    """

    kind: str
    trace_id: str
    span_id: str | None
    payload: dict[str, Any]
    parent_span_id: str | None = None
    at: datetime | None = None


@dataclass
class Normalized:
    calls: list[dict[str, Any]] = field(default_factory=list)
    spans: list[dict[str, Any]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    records_read: int = 0
    fragments: list[Fragment] = field(default_factory=list)

    @property
    def records_quarantined(self) -> int:
        return len({p.line for p in self.problems if p.line is not None})

    @property
    def records_ingested(self) -> int:
        return self.records_read - self.records_quarantined

    def extend(self, other: Normalized) -> None:
        self.calls.extend(other.calls)
        self.spans.extend(other.spans)
        self.problems.extend(other.problems)
        self.records_read += other.records_read
        self.fragments.extend(other.fragments)


@dataclass(frozen=True)
class RawRecord:
    line: int
    byte_offset: int
    value: Any


class AmbiguousRecord(ValueError):
    """An object with the same key twice: which value the producer meant is unknowable."""


class NonFiniteNumber(ValueError):
    """NaN or Infinity: Python's json accepts them, JSON and Arrow consumers do not."""


class TooDeep(ValueError):
    """A value nested deeper than ``MAX_DEPTH``: it parses, but no later stage could write it back."""


# The deepest nesting a record may have (the record itself is level 1). orjson, which
# every stage after ingest writes JSON with, refuses anything deeper (TypeError), while
# json parses up to ~1000 levels: a record between the two would be stored and then
# break whoever serializes it next, so it is quarantined here, alone.
MAX_DEPTH = 254


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests dicts and lists more than ``limit`` levels (iteratively: no recursion limit)."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def check_depth(value: Any, text: bytes | str) -> Any:
    """``value`` (parsed from ``text``), or TooDeep when it nests past ``MAX_DEPTH``.
    Only text with more brackets than that can, so most records cost a count."""
    if isinstance(text, str):
        brackets = text.count("[") + text.count("{")
    else:
        brackets = text.count(b"[") + text.count(b"{")
    if brackets > MAX_DEPTH and _deeper_than(value, MAX_DEPTH):
        raise TooDeep
    return value


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise AmbiguousRecord
    return value


def _no_constant(_: str) -> Any:
    raise NonFiniteNumber


# Strict JSON: duplicate keys and NaN/Infinity are errors, not last-wins and floats.
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_pairs, parse_constant=_no_constant)
_WHITESPACE = re.compile(r"[ \t\n\r]*")
# a JSON string (possibly unterminated) or a structural character: enough to find an element's end
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*(?P<close>")?|[\[\]{},]', re.DOTALL)


def _text(data: bytes) -> str:
    return data.decode(json.detect_encoding(data))


def _strict_slow(data: bytes | str) -> Any:
    return _DECODER.decode(_text(data) if isinstance(data, bytes) else data)


# Below this many brackets no record can nest deeper than json's recursion
# limit, where json and orjson (limit 1024) would disagree.
_SHALLOW = 900


def strict_loads(data: bytes | str) -> Any:
    """``json.loads`` that refuses duplicate keys (AmbiguousRecord), NaN/Infinity
    (NonFiniteNumber) and nesting past ``MAX_DEPTH`` (TooDeep).

    orjson parses first (several times faster); its value is kept only when it
    is certainly json's: orjson refuses NaN, Infinity, invalid UTF-8 and lone
    surrogates (the strict decoder then gives the error or value), but takes
    the last of duplicate keys and reads ints past 64 bits as floats. A dropped
    duplicate shows as a ``:`` that is in the text and not in orjson's
    re-serialization (a colon escaped as \\u003a could hide one: such text
    goes the slow way), a big int as an ``e+`` float in it.
    """
    if isinstance(data, str):
        return check_depth(_strict_slow(data), data)
    raw = data
    if raw.count(b"[") + raw.count(b"{") >= _SHALLOW or b"\\u003" in raw:
        return check_depth(_strict_slow(data), raw)
    try:
        value = orjson.loads(raw)
    except (orjson.JSONDecodeError, RecursionError):
        return check_depth(_strict_slow(data), raw)
    try:
        again = orjson.dumps(value)
    except TypeError:  # what orjson read it cannot write: nesting past its limit
        return check_depth(_strict_slow(data), raw)
    # the same bytes back (compact JSON, as most producers write it) cannot hide a duplicate
    if (again != raw and again.count(b":") != raw.count(b":")) or b"e+" in again:
        return _strict_slow(data)
    return value


def json_problem(error: BaseException) -> tuple[str, str]:
    """(error_class, message) for a record that does not parse. Never quotes the record."""
    if isinstance(error, AmbiguousRecord):
        return "ambiguous_record", "an object in the record has the same key twice; fix the producer and re-deliver"
    if isinstance(error, NonFiniteNumber):
        return "invalid_json", "NaN or Infinity is not JSON; the producer must send a number or null"
    if isinstance(error, (RecursionError, TooDeep)):
        return "too_deep", f"the record nests deeper than tracelake stores (at most {MAX_DEPTH} levels); flatten it"
    return "invalid_json", f"expected JSON: {_json_reason(error)}"


# Everything parsing (and the re-serialization that checks it) can raise for one record:
# caught per record, so a record that breaks a parser is that record's problem, never its object's.
PARSE_ERRORS = (ValueError, TypeError, OverflowError, UnicodeDecodeError, RecursionError)


def _element_end(text: str, start: int) -> int | None:
    """Where the array element starting at ``start`` ends (the index of the
    ``,`` or ``]`` after it), found without parsing it; None when the text ends first."""
    depth = 0
    for token in _TOKEN.finditer(text, start):
        t = token.group()
        if t[0] == '"':
            if token.group("close") is None:
                return None  # the string never ends
            continue
        if t in "[{":
            depth += 1
        elif t in "]}":
            if depth == 0:
                return token.start()
            depth -= 1
        elif depth == 0:
            return token.start()
    return None


def _byte_offset(text: str, index: int) -> int:
    return len(text[:index].encode())


def _array_records(text: str, max_record_bytes: int) -> Iterator[RawRecord | Problem]:
    """Elements of a JSON array one by one, so one bad or oversized element is
    one quarantined record, not a failed object. Elements are numbered from 1."""
    i = _WHITESPACE.match(text, text.index("[") + 1).end()
    if text.startswith("]", i):
        return
    number = 0
    while True:
        number += 1
        start = i
        try:
            value, end = _DECODER.raw_decode(text, i)
            check_depth(value, text[start:end])
        except PARSE_ERRORS as e:
            error_class, message = json_problem(e)
            found = _element_end(text, i)
            yield Problem(error_class, f"array element: {message}", number, _byte_offset(text, start))
            if found is None:
                yield Problem("invalid_json", f"the array ends inside element {number}; the object is truncated")
                return
            end = found
        else:
            size = end - start
            if size * 4 > max_record_bytes and (size := len(text[start:end].encode())) > max_record_bytes:
                yield Problem(
                    "oversized_record",
                    f"array element is {size} bytes; the limit is {max_record_bytes}",
                    number,
                    _byte_offset(text, start),
                )
            else:
                yield RawRecord(number, 0, value)
        i = _WHITESPACE.match(text, end).end()
        if text.startswith(",", i):
            i = _WHITESPACE.match(text, i + 1).end()
            continue
        if text.startswith("]", i) and not text[i + 1 :].strip():
            return
        yield Problem("invalid_json", f"expected ',' or ']' after array element {number}")
        return


def json_records(
    data: bytes, *, lines: bool = False, max_record_bytes: int = MAX_RECORD_BYTES
) -> Iterator[RawRecord | Problem]:
    """Records of a JSON document, a JSON array, or JSON Lines.

    With ``lines`` (a ``.jsonl`` key) every non-blank line is a record.
    Otherwise an array is a list of records (read element by element), an
    object is one record, and "extra data" after the first document means it
    was JSON Lines after all (the Collector's file exporter writes ``.json``
    files with one request per line). Lines are 1-based; array elements are
    numbered like lines. Parsing is strict (see ``strict_loads``); a record
    that fails is a Problem on its line, the others go on.
    """
    if not lines:
        stripped = data.lstrip()
        if stripped.startswith(b"["):
            try:
                text = _text(data)
            except UnicodeDecodeError as e:
                yield Problem("invalid_json", f"expected UTF-8 JSON: {_json_reason(e)}")
                return
            yield from _array_records(text, max_record_bytes)
            return
        if len(data) > max_record_bytes:
            lines = True
        else:
            try:
                value = strict_loads(data)
            except json.JSONDecodeError as e:
                if e.msg != "Extra data":
                    yield Problem("invalid_json", f"expected a JSON document: {_json_reason(e)}")
                    return
                lines = True
            except UnicodeDecodeError as e:
                yield Problem("invalid_json", f"expected UTF-8 JSON: {_json_reason(e)}")
                return
            except PARSE_ERRORS as e:
                if b"\n" not in stripped.rstrip():
                    yield Problem(*json_problem(e), 1, 0)
                    return
                lines = True  # perhaps JSON Lines with one bad line: judge each line
            else:
                yield RawRecord(1, 0, value)
                return
    offset = 0
    for number, line in enumerate(data.split(b"\n"), start=1):
        start = offset
        offset += len(line) + 1
        if not line.strip():
            continue
        if len(line) > max_record_bytes:
            yield Problem(
                "oversized_record", f"line is {len(line)} bytes; the limit is {max_record_bytes}", number, start
            )
            continue
        try:
            yield RawRecord(number, start, strict_loads(line))
        except PARSE_ERRORS as e:
            error_class, message = json_problem(e)
            if error_class == "invalid_json" and not isinstance(e, NonFiniteNumber):
                message = f"expected one JSON object per line: {_json_reason(e)}"
            yield Problem(error_class, message, number, start)


def _json_reason(error: Exception) -> str:
    # json's messages name a position, never the content; unicode errors name a byte
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at line {error.lineno} column {error.colno}"
    if isinstance(error, UnicodeDecodeError):
        return f"invalid UTF-8 at byte {error.start}"
    return type(error).__name__


@functools.cache  # the format modules' models are all imported with pipelines.formats
def _field_names() -> frozenset[str]:
    """Every field name (and alias) of every pydantic model loaded: the parts of
    an error location that are structure, not a record's own dict keys."""
    names: set[str] = set()
    todo = list(pydantic.BaseModel.__subclasses__())
    while todo:
        model = todo.pop()
        todo += model.__subclasses__()
        for name, info in getattr(model, "model_fields", {}).items():
            names.add(name)
            if info.alias:
                names.add(info.alias)
    return frozenset(names)


def _location(loc: tuple[Any, ...], fields: frozenset[str]) -> str:
    # a dict key in a location is the record's own data (an email as a map key):
    # keep field names and list positions, say "<key>" for the rest
    parts = []
    for part in loc:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif part in fields or part in ("function-after", "function-before", "union", "list", "dict"):
            parts.append(f".{part}" if parts else str(part))
        else:
            parts.append(".<key>" if parts else "<key>")
    return "".join(parts) or "(record)"


def validation_message(error: pydantic.ValidationError, limit: int = 3) -> str:
    """A pydantic error without the offending values or dict keys (they may be PII)."""
    fields = _field_names()
    parts = []
    for item in error.errors(include_input=False, include_url=False, include_context=False)[:limit]:
        parts.append(f"{_location(item['loc'], fields)}: {item['msg']}")
    more = error.error_count() - limit
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


# Times outside this range are not trace times (a zero date, a sentinel, a
# unit mistake): quarantined, not partitioned into year 1 or 9999.
EARLIEST = datetime(1990, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)


def validated_object(model: type[M], value: Any, what: str) -> M:
    """A JSON object record as ``model``; RecordError (quarantine) naming
    ``what`` was expected, without the record's values, when it is not one."""
    from pipelines.record.rows import RecordError

    if not isinstance(value, dict):
        raise RecordError("wrong_type", f"expected a JSON object, got {type(value).__name__}")
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as e:
        raise RecordError("invalid_record", f"not {what}: {validation_message(e)}") from None


def _as_utc(value: datetime) -> datetime:
    # zone-less timestamps are UTC by convention (Langfuse, many loggers)
    try:
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:
        raise ValueError("the time with its offset falls outside the years 1..9999") from None
    if not EARLIEST <= value < LATEST:
        raise ValueError(f"the time is outside {EARLIEST.year}..{LATEST.year - 1}; send the time the event happened")
    return value


UtcDatetime = Annotated[datetime, pydantic.AfterValidator(_as_utc)]


# What a record that slipped past validation can still raise while it becomes
# rows (a time at the end of the calendar plus a duration, a recursive walk of
# a deep value): one record's problem, never the object's or the day's.
UNEXPECTED = (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError, IndexError)


def unexpected_problem(error: BaseException, item: RawRecord) -> Problem:
    """A Problem for an exception a format did not foresee; by type only, the message may quote the record."""
    if isinstance(error, RecursionError):
        error_class, message = json_problem(error)
    else:
        error_class, message = "invalid_record", f"the record could not be turned into rows ({type(error).__name__})"
    return Problem(error_class, message, item.line, item.byte_offset)


class _Reading(Protocol):
    problems: list[Problem]
    records_read: int


def each_record(records: Iterable[RawRecord | Problem], out: _Reading, handle: Callable[[RawRecord], None]) -> None:
    """The loop every format shares: count each record read, run ``handle`` on
    it, and quarantine it, by line, when the reader or ``handle`` (by raising
    RecordError) says it is bad. ``handle`` adds rows only once nothing more
    can fail, so a record is either whole in the output or in quarantine."""
    from pipelines.record.rows import RecordError  # record.rows imports nothing from formats

    for item in records:
        if isinstance(item, Problem):
            out.problems.append(item)
            out.records_read += item.line is not None
            continue
        out.records_read += 1
        try:
            handle(item)
        except RecordError as e:
            out.problems.append(Problem(e.error_class, e.message, item.line, item.byte_offset))
        except UNEXPECTED as e:
            out.problems.append(unexpected_problem(e, item))


def normalize_records(
    data: bytes, *, lines: bool, build: Callable[[RawRecord], dict[str, Any]], span_of: Callable[[dict], dict]
) -> Normalized:
    """The loop of a format whose records are one call each: ``build`` makes the
    finalized call (or raises RecordError, which quarantines the record)."""
    out = Normalized()

    def handle(item: RawRecord) -> None:
        call = build(item)
        out.calls.append(call)
        out.spans.append(span_of(call))

    each_record(json_records(data, lines=lines), out, handle)
    return out


def parse_time(value: Any, what: str) -> datetime | None:
    """An ISO 8601 text (``Z`` or no zone: UTC) or unix seconds -> an aware UTC datetime."""
    from pipelines.record.rows import RecordError

    if value is None or value == "":
        return None
    try:
        if isinstance(value, int | float):
            return _as_utc(datetime.fromtimestamp(value, UTC))
        if isinstance(value, datetime):
            parsed = value
        else:
            parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        return _as_utc(parsed)
    except (TypeError, ValueError, OverflowError, OSError) as e:
        if isinstance(e, ValueError) and str(e).startswith("the time"):
            raise RecordError("invalid_record", f"{what}: {e}") from None
        raise RecordError("invalid_record", f"{what} is not an ISO 8601 time or a unix timestamp") from None


PARQUET_MAGIC = b"PAR1"


def _plain(value: Any) -> Any:
    """Parquet maps come back as lists of (key, value) pairs: make them dicts."""
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {k: _plain(v) for k, v in value}
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def is_parquet(data: bytes) -> bool:
    return data[:4] == PARQUET_MAGIC


def parquet_records(data: bytes, limit: int | None = None) -> Iterator[RawRecord | Problem]:
    """Rows of a Parquet object as records (numbered from 1 like lines)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(io.BytesIO(data))
        number = 0
        for batch in parquet.iter_batches(batch_size=1024):
            for row in batch.to_pylist():
                number += 1
                yield RawRecord(number, 0, _plain(row))
                if limit is not None and number >= limit:
                    return
    except (pa.ArrowException, OSError) as e:
        yield Problem("invalid_parquet", f"not a readable Parquet file ({type(e).__name__})")


def table_records(data: bytes, *, lines: bool) -> Iterator[RawRecord | Problem]:
    """Records of a JSON, JSON Lines or Parquet object."""
    if is_parquet(data):
        return parquet_records(data)
    return json_records(data, lines=lines)


# The `spans.kind` values the quality suite accepts; a source's own kinds map onto them.
SPAN_KIND_VALUES = frozenset(
    ("llm_call", "tool", "retrieval", "think", "state", "session_start", "session_end", "check", "evaluation")
    + ("agent", "chain", "other")
)
SPAN_KIND_ALIASES = {
    "reranker": "retrieval",
    "guardrail": "check",
    "evaluator": "evaluation",
    "feedback": "evaluation",
    "invoke_agent": "agent",
    "create_agent": "agent",
    "invoke_workflow": "chain",
}


def known_kind(kind: str | None) -> str:
    """A source's span kind as one of ``SPAN_KIND_VALUES`` (the source's own word stays in the row's attributes)."""
    kind = (kind or "other").lower()
    kind = SPAN_KIND_ALIASES.get(kind, kind)
    return kind if kind in SPAN_KIND_VALUES else "other"
