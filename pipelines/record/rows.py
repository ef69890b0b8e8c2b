"""Building `calls` and `spans` rows: defaults for every column, derived ids,
hashes and capture flags. Format modules fill what their source has and call
``finalize_call`` / ``finalize_span``; nothing else computes these columns."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa

from pipelines.record import canonical
from pipelines.record.capture import context_complete, missing_capture_items
from pipelines.record.schema import CALLS, SCHEMA_VERSION, SPANS

# Columns that describe where and when a row was loaded, not what it says, and what the
# warehouse derives from the rest of the row when it writes it (record/derived.py).
BOOKKEEPING = frozenset(
    ("ingested_at", "source_etag", "record_sha256", "source_uri", "source_line", "rot_set_key", "occurred_hour")
)


class RecordError(Exception):
    """A record that cannot become rows. The message must not quote the
    record (it may hold PII): it says what is missing or what was expected."""

    def __init__(self, error_class: str, message: str):
        super().__init__(message)
        self.error_class = error_class
        self.message = message


def _require(row: Mapping[str, Any], kind: str) -> None:
    for name in ("source_format", "trace_id", "span_id", "occurred_at"):
        if not row.get(name):
            raise RecordError("missing_field", f"{kind} has no {name}")


class _Columns:
    """A table's column names, computed once from its schema: a new row is a
    copy of the all-None row (in schema order) updated with what is given."""

    def __init__(self, schema: pa.Schema, table: str):
        self.table = table
        self.names = frozenset(schema.names)
        self.empty = dict.fromkeys(schema.names)

    def row(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Every column (None unless given); a name that is not a column is a bug."""
        if not fields.keys() <= self.names:
            raise KeyError(f"not columns of {self.table}: {sorted(set(fields) - self.names)}")
        row = self.empty.copy()
        row.update(fields)
        return row


_CALL_COLUMNS = _Columns(CALLS, "calls")
_SPAN_COLUMNS = _Columns(SPANS, "spans")
# the `spans` columns span_for_call takes from the call
_FROM_CALL = frozenset(
    ("trace_id", "span_id", "parent_span_id", "session_id", "user_id", "call_id", "source_format", "source_uri",
     "source_etag", "source_line", "kind", "name", "occurred_at", "ended_at", "duration_ms", "status",
     "input_tokens", "output_tokens", "cost_usd")
)  # fmt: skip


def document_row(doc_id: Any, rank: int, score: Any, text: Any, tokens: int | None = None) -> dict[str, Any]:
    """One retrieved document (the DOCUMENT struct), whatever source named its fields."""
    return {
        "doc_id": None if doc_id is None else str(doc_id),
        "rank": rank,
        "score": score,
        "text": text,
        "text_sha256": canonical.sha256_hex(text) if isinstance(text, str) else None,
        "tokens": tokens,
    }


def new_call(**fields: Any) -> dict[str, Any]:
    return _CALL_COLUMNS.row(fields)


def new_span(**fields: Any) -> dict[str, Any]:
    return _SPAN_COLUMNS.row(fields)


def _ms_between(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds() * 1000.0


def finalize_call(
    call: dict[str, Any], block_tokens: Mapping[str, int] | None = None, *, plain_request: Any = None
) -> dict[str, Any]:
    """Derive ids, dates, hashes and capture flags. Mutates and returns ``call``.
    ``plain_request`` is the request ``request_json`` was written from, when
    ``anthropic_shape.request_columns_and_plain`` returned it."""
    _require(call, "call")
    call["call_id"] = canonical.call_id(call["source_format"], call["trace_id"], call["span_id"])
    call["schema_version"] = SCHEMA_VERSION
    call["occurred_date"] = call["occurred_at"].date()
    if call.get("latency_ms") is None:
        call["latency_ms"] = _ms_between(call.get("occurred_at"), call.get("ended_at"))
    # request_json is the canonical JSON of the request (canonical.canonical_json),
    # so its bytes are exactly what the hashing spec hashes
    request_json = call.get("request_json")
    if request_json is not None:
        call["request_sha256"] = canonical.sha256_hex(request_json)
        if call.get("block_hashes") is None:
            docs = (call.get("retrieval") or {}).get("documents") or []
            call["block_hashes"] = canonical.block_hashes_from_json(
                request_json, [(d["doc_id"], d.get("text")) for d in docs], block_tokens, plain_request=plain_request
            )
    recorded = call.get("rendered_request_sha256")
    if recorded and call.get("request_sha256"):
        call["request_hash_matches"] = recorded == call["request_sha256"]
    if call.get("content_captured") is None:
        call["content_captured"] = bool(call.get("messages"))
    call["truncated"] = bool(call.get("truncated"))
    call["context_complete"] = context_complete(call)
    call["capture_missing"] = missing_capture_items(call)
    call["record_sha256"] = canonical.record_sha256(call, BOOKKEEPING)
    return call


def finalize_span(span: dict[str, Any], *, span_key: str | None = None) -> dict[str, Any]:
    """Derive the key, date, duration and fingerprint. ``span_key``: the key when the
    caller has it already (an llm span's is its call's ``call_id``, the same hash)."""
    _require(span, "span")
    span["span_key"] = span_key or canonical.call_id(span["source_format"], span["trace_id"], span["span_id"])
    span["occurred_date"] = span["occurred_at"].date()
    if span.get("duration_ms") is None:
        span["duration_ms"] = _ms_between(span.get("occurred_at"), span.get("ended_at"))
    span["record_sha256"] = canonical.record_sha256(span, BOOKKEEPING)
    return span


def span_for_call(call: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    """The `spans` row of an LLM call, so every call is also a span.

    Built straight onto a copy of the all-None row, and keyed by the call's own
    ``call_id`` (the same hash of the same three values ``finalize_span`` would
    compute): one of these is built for every call of a day (issue 13)."""
    if fields and fields.keys() & _FROM_CALL:
        raise TypeError(f"span_for_call: these columns come from the call: {sorted(fields.keys() & _FROM_CALL)}")
    usage = call.get("usage") or {}
    span = _SPAN_COLUMNS.row(fields) if fields else _SPAN_COLUMNS.empty.copy()
    get = call.get
    span.update(
        trace_id=call["trace_id"],
        span_id=call["span_id"],
        parent_span_id=get("parent_span_id"),
        session_id=get("session_id"),
        user_id=get("user_id"),
        call_id=call["call_id"],
        source_format=call["source_format"],
        source_uri=get("source_uri"),
        source_etag=get("source_etag"),
        source_line=get("source_line"),
        kind="llm_call",
        name=f"chat {get('request_model') or ''}".strip(),
        occurred_at=get("occurred_at"),
        ended_at=get("ended_at"),
        duration_ms=get("latency_ms"),
        status=get("status"),
        input_tokens=usage.get("input_tokens"),
        output_tokens=usage.get("output_tokens"),
        cost_usd=usage.get("cost_usd"),
    )
    return finalize_span(span, span_key=call["call_id"])


# What pyarrow raises for a value that does not fit a column; its messages quote the value.
ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError)


def converted(rows: list[dict[str, Any]], schema: pa.Schema) -> tuple[pa.RecordBatch | None, dict[int, str]]:
    """(the rows as an Arrow record batch of ``schema``, {}) when they all fit,
    else (None, ``misfits``): the schema check and the conversion are one step."""
    try:
        return from_columns(rows, schema), {}
    except ARROW_ERRORS:
        return None, misfits(rows, schema)


def from_columns(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    """``RecordBatch.from_pylist(rows, schema)``, column by column: pyarrow
    converts a list of values about twice as fast as a list of 70-key dicts,
    and one ``itemgetter`` per row transposed by ``zip`` (both in C) costs
    half as much as a Python loop over the rows per column."""
    if not rows:
        return pa.RecordBatch.from_pylist([], schema=schema)
    try:
        values = list(map(_getter(schema), rows))
    except KeyError:  # a row built without every column
        return pa.RecordBatch.from_pylist(rows, schema=schema)
    transposed = zip(*values, strict=True)
    columns = [pa.array(column, type=field.type) for column, field in zip(transposed, schema, strict=True)]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


@functools.cache
def _getter(schema: pa.Schema) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    if len(schema.names) == 1:  # itemgetter of one name returns the value, not a tuple
        name = schema.names[0]
        return lambda row: (row[name],)
    return operator.itemgetter(*schema.names)


def misfits(rows: list[dict[str, Any]], schema: pa.Schema) -> dict[int, str]:
    """Rows that would fail ``pa.Table.from_pylist(rows, schema)``: {row index:
    the first column whose value does not fit}. Checked column by column, then
    row by row for a failing column, so one bad value is pinned to its row
    instead of failing the whole batch when it is converted."""
    bad: dict[int, str] = {}
    if not rows:
        return bad
    try:  # the usual case, all rows fit: one conversion says so
        from_columns(rows, schema)
        return bad
    except ARROW_ERRORS:
        pass
    for column in schema:
        try:
            pa.array([row.get(column.name) for row in rows], type=column.type)
            continue
        except ARROW_ERRORS:
            pass
        for i, row in enumerate(rows):
            if i in bad:
                continue
            try:
                pa.array([row.get(column.name)], type=column.type)
            except ARROW_ERRORS:
                bad[i] = _misfit_path(column.name, column.type, row.get(column.name))
    return bad


def _misfit_path(path: str, arrow_type: pa.DataType, value: Any) -> str:
    """The innermost struct field whose value does not fit (``params.max_tokens``)."""
    if pa.types.is_struct(arrow_type) and isinstance(value, Mapping):
        for field in arrow_type:
            try:
                pa.array([value.get(field.name)], type=field.type)
            except ARROW_ERRORS:
                return _misfit_path(f"{path}.{field.name}", field.type, value.get(field.name))
    return path
