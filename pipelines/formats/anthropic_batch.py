"""Anthropic Message Batches files: results JSONL and the request lines they answer.

A results line (``{"custom_id", "result": {"type", "message" | "error"}}``) and
the request line it answers (``{"custom_id", "params"}``, the create body as
stored one request per line) are one call, ``trace_id = span_id = custom_id``;
they are joined wherever they meet (one object, one ingest batch, or a call
already stored). Results carry no time: a line is dated by the date in its key
(``YYYY/MM/DD`` or ``year=/month=/day=``), and a call keeps the date it was
first seen.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pipelines.formats.base import Normalized, RawRecord, SourceRef, normalize_records
from pipelines.record.anthropic_shape import request_columns, response_columns
from pipelines.record.canonical import canonical_json
from pipelines.record.rows import RecordError, finalize_call, new_call, span_for_call

FORMAT = "anthropic_batch"
KEY_DATE = re.compile(r"(?:year=)?(\d{4})/(?:month=)?(\d{2})/(?:day=)?(\d{2})(?:/|$)")
BATCH_STATUS = {"succeeded": "ok", "errored": "error", "canceled": "canceled", "expired": "expired"}


def key_date(key: str) -> datetime | None:
    match = KEY_DATE.search(key)
    if not match:
        return None
    year, month, day = (int(g) for g in match.groups())
    return datetime(year, month, day, tzinfo=UTC)


def _batch_call(rec: RawRecord, source: SourceRef, dated: datetime | None) -> dict[str, Any]:
    value = rec.value
    if not isinstance(value, dict) or not value.get("custom_id"):
        raise RecordError("invalid_record", "expected a Message Batches line with a custom_id")
    if dated is None:
        raise RecordError("missing_field", "batch lines carry no time and the key has no YYYY/MM/DD date")
    custom_id = str(value["custom_id"])
    call = new_call(
        trace_id=custom_id,
        span_id=custom_id,
        source_format=FORMAT,
        source_uri=source.uri,
        source_etag=source.etag,
        source_line=rec.line,
        occurred_at=dated,
        provider="anthropic",
        endpoint="messages/batches",
    )
    if isinstance(value.get("params"), dict):
        call.update(request_columns(value["params"]))
        metadata = value["params"].get("metadata") or {}
        call["user_id"] = metadata.get("user_id") if isinstance(metadata, dict) else None
    result = value.get("result")
    if isinstance(result, dict):
        kind = result.get("type")
        call["status"] = BATCH_STATUS.get(kind, kind)
        if kind == "succeeded" and isinstance(result.get("message"), dict):
            call.update(response_columns(result["message"]))
        elif kind == "errored":
            error = (result.get("error") or {}).get("error") or result.get("error") or {}
            call["error_type"] = error.get("type")
    elif "params" not in value:
        raise RecordError("invalid_record", "batch line has neither params nor result")
    extra = {k: v for k, v in value.items() if k not in ("custom_id", "params", "result")}
    call["extra_json"] = canonical_json(extra) if extra else None
    return finalize_call(call)


def normalize(data: bytes, source: SourceRef, *, lines: bool = True) -> Normalized:
    dated = key_date(source.key)
    # a batch file is JSON Lines whatever its suffix
    return normalize_records(data, lines=True, build=lambda rec: _batch_call(rec, source, dated), span_of=span_for_call)


def looks_like(record: Any) -> bool:
    return isinstance(record, dict) and "custom_id" in record and ("result" in record or "params" in record)
