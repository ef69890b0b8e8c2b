"""Raw Anthropic Messages API logs: one request/response exchange per record.

A ``.json`` object, an array, or ``.jsonl``, as a proxy or an HTTP hook logs it::

    {"request": {<body as sent>}, "response": {<body as received>},
     "request_headers": {...}?, "response_headers": {...}?, "status": 200?,
     "started_at": "...", "ended_at": "..."?, "trace_id": ...?, "span_id": ...?}

``request``/``response`` may also be ``{"body": ..., "headers": ...}``. The
call's identity is the trace/span id when given, else the response id (or the
``request-id`` header, or a hash of the request and its time). A request that
continues a server-side thread (``thread.previous_message_id``) holds only the
new turn: the call gets ``previous_response_id`` and is not context-complete.
"""

from __future__ import annotations

from typing import Any

from pipelines.formats.base import Normalized, RawRecord, SourceRef, normalize_records, parse_time
from pipelines.record.anthropic_shape import request_columns, response_columns
from pipelines.record.canonical import canonical_json, sha256_hex
from pipelines.record.rows import RecordError, finalize_call, new_call, span_for_call

FORMAT = "anthropic_messages"


def _body_and_headers(value: Any, headers: Any) -> tuple[dict[str, Any] | None, dict[str, str]]:
    if isinstance(value, dict) and "body" in value and ("headers" in value or "status" in value):
        headers = value.get("headers") or headers
        value = value["body"]
    heads = {str(k).lower(): str(v) for k, v in (headers or {}).items()} if isinstance(headers, dict) else {}
    return (value if isinstance(value, dict) else None), heads


def _pair_call(rec: RawRecord, source: SourceRef) -> dict[str, Any]:
    value = rec.value
    if not isinstance(value, dict):
        raise RecordError("wrong_type", f"expected a JSON object, got {type(value).__name__}")
    request, request_headers = _body_and_headers(value.get("request"), value.get("request_headers"))
    response, response_headers = _body_and_headers(value.get("response"), value.get("response_headers"))
    if request is None or not isinstance(request.get("messages"), list):
        raise RecordError("invalid_record", "request is missing or has no messages list")
    started = parse_time(value.get("started_at") or value.get("timestamp"), "started_at")
    if started is None:
        raise RecordError("missing_field", "exchange has no started_at")
    call = new_call(
        source_format=FORMAT,
        source_uri=source.uri,
        source_etag=source.etag,
        source_line=rec.line,
        occurred_at=started,
        ended_at=parse_time(value.get("ended_at"), "ended_at"),
        latency_ms=value.get("latency_ms"),
        provider="anthropic",
        provider_request_id=response_headers.get("request-id") or value.get("request_id"),
        **request_columns(request),
    )
    metadata = request.get("metadata") or {}
    call["user_id"] = metadata.get("user_id") if isinstance(metadata, dict) else None
    thread = request.get("thread")
    if isinstance(thread, dict) and thread.get("previous_message_id"):
        # a server-side thread: the body holds only the new turn
        call["previous_response_id"] = thread["previous_message_id"]
    status = value.get("status")
    if response is not None and response.get("type") == "error":
        error = response.get("error") or {}
        call.update(status="error", error_type=error.get("type"))
    elif response is not None:
        call.update(response_columns(response), status="ok")
    else:
        call["status"] = "error" if status and int(status) >= 400 else None
    extra = {
        k: v
        for k, v in value.items()
        if k not in ("request", "response", "started_at", "timestamp", "ended_at", "latency_ms", "trace_id", "span_id")
    }
    if request_headers.get("anthropic-version"):
        extra["anthropic_version"] = request_headers["anthropic-version"]
    call["extra_json"] = canonical_json(extra) if extra else None
    fallback = sha256_hex(f"{call['request_json']}|{started.isoformat()}")[:32]
    span_id = value.get("span_id") or call.get("response_id") or call.get("provider_request_id") or fallback
    call.update(trace_id=value.get("trace_id") or span_id, span_id=span_id)
    return finalize_call(call)


def normalize(data: bytes, source: SourceRef, *, lines: bool = False) -> Normalized:
    return normalize_records(data, lines=lines, build=lambda rec: _pair_call(rec, source), span_of=span_for_call)


def looks_like(record: Any) -> bool:
    return isinstance(record, dict) and "request" in record and "response" in record
