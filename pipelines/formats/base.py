"""What every format module takes and returns.

A format module is a pure function ``normalize(data, source) -> Normalized``:
decompressed object bytes in, canonical rows out, plus one ``Problem`` per
record it could not turn into rows. Problems never quote the record: it may
hold PII. They say where it is and what was expected.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Protocol

import pydantic

# A line longer than this is quarantined rather than parsed: one runaway
# record must not take a worker's memory with it.
MAX_RECORD_BYTES = 8 * 1024 * 1024


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


def json_records(
    data: bytes, *, lines: bool = False, max_record_bytes: int = MAX_RECORD_BYTES
) -> Iterator[RawRecord | Problem]:
    """Records of a JSON document, a JSON array, or JSON Lines.

    With ``lines`` (a ``.jsonl`` key) every non-blank line is a record.
    Otherwise the object is parsed whole: an array is a list of records, an
    object is one record, and "extra data" after the first document means it
    was JSON Lines after all (the Collector's file exporter writes ``.json``
    files with one request per line). Lines are 1-based; array elements are
    numbered like lines.
    """
    if not lines:
        if len(data) > max_record_bytes and not data.lstrip().startswith(b"["):
            lines = True
        else:
            try:
                value = json.loads(data)
            except json.JSONDecodeError as e:
                if e.msg != "Extra data":
                    yield Problem("invalid_json", f"expected a JSON document: {_json_reason(e)}")
                    return
                lines = True
            except UnicodeDecodeError as e:
                yield Problem("invalid_json", f"expected UTF-8 JSON: {_json_reason(e)}")
                return
            else:
                values = value if isinstance(value, list) else [value]
                for i, item in enumerate(values, start=1):
                    yield RawRecord(i, 0, item)
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
            yield RawRecord(number, start, json.loads(line))
        except (ValueError, UnicodeDecodeError) as e:
            yield Problem("invalid_json", f"expected one JSON object per line: {_json_reason(e)}", number, start)


def _json_reason(error: Exception) -> str:
    # json's messages name a position, never the content; unicode errors name a byte
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at line {error.lineno} column {error.colno}"
    if isinstance(error, UnicodeDecodeError):
        return f"invalid UTF-8 at byte {error.start}"
    return type(error).__name__


def validation_message(error: pydantic.ValidationError, limit: int = 3) -> str:
    """A pydantic error without the offending values (they may be PII)."""
    parts = []
    for item in error.errors(include_input=False, include_url=False)[:limit]:
        loc = ".".join(str(p) for p in item["loc"]) or "(record)"
        parts.append(f"{loc}: {item['msg']}")
    more = error.error_count() - limit
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def _as_utc(value: datetime) -> datetime:
    # zone-less timestamps are UTC by convention (Langfuse, many loggers)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


UtcDatetime = Annotated[datetime, pydantic.AfterValidator(_as_utc)]


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
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, datetime):
            parsed = value
        else:
            parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except (TypeError, ValueError, OverflowError):
        raise RecordError("invalid_record", f"{what} is not an ISO 8601 time or a unix timestamp") from None
    return _as_utc(parsed)


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
