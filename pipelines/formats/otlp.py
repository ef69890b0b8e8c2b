"""Reading OTLP/JSON: the Collector's file and S3 exporters, and the Python
OTLP JSON file exporter.

An object holds one ``ExportTraceServiceRequest`` or ``ExportLogsServiceRequest``
(S3 exporter) or one per line (file exporter); both are records here. Ids are
hex (base64 is accepted too: protobuf's generic JSON mapping writes it), int64
values may be numbers or strings, enums are ints, unknown fields are ignored.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pipelines.formats.base import Problem, RawRecord, each_record, json_records
from pipelines.record.rows import RecordError

SPAN_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUS_CODES = {0: "UNSET", 1: "OK", 2: "ERROR"}


def any_value(value: Any) -> Any:
    """An OTLP AnyValue -> the plain Python value (``{}`` is None)."""
    if not isinstance(value, dict):
        return value
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [any_value(v) for v in (value["arrayValue"] or {}).get("values") or []]
    if "kvlistValue" in value:
        return {kv.get("key"): any_value(kv.get("value")) for kv in (value["kvlistValue"] or {}).get("values") or []}
    if "bytesValue" in value:
        return value["bytesValue"]  # base64 text; JSON cannot hold bytes
    return None


def attributes(items: Any) -> dict[str, Any]:
    return {kv.get("key"): any_value(kv.get("value")) for kv in items or [] if isinstance(kv, dict)}


def hex_id(value: Any, size: int) -> str | None:
    """A trace (16 bytes) or span (8 bytes) id as lowercase hex; None when absent or all zero."""
    if not value or not isinstance(value, str):
        return None
    text = value.lower()
    if len(text) != size * 2 or any(c not in "0123456789abcdef" for c in text):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        if len(raw) != size:
            return None
        text = raw.hex()
    return None if set(text) == {"0"} else text


def unix_nanos(value: Any) -> datetime | None:
    if value in (None, "", 0, "0"):
        return None
    nanos = int(value)
    # microseconds: the tables store timestamp("us")
    return datetime.fromtimestamp(nanos // 1000 / 1_000_000, UTC)


@dataclass
class Scope:
    resource: dict[str, Any]
    name: str | None
    version: str | None
    schema_url: str | None = None


@dataclass
class OtlpSpan:
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    start: datetime
    end: datetime | None
    status_code: str
    status_message: str | None
    attributes: dict[str, Any]
    events: list[dict[str, Any]]
    links: list[dict[str, Any]]
    scope: Scope
    line: int
    byte_offset: int


@dataclass
class OtlpLog:
    trace_id: str | None
    span_id: str | None
    time: datetime | None
    event_name: str | None
    body: Any
    attributes: dict[str, Any]
    severity: str | None
    scope: Scope
    line: int
    byte_offset: int
    index: int  # position within the record, for a stable id


@dataclass
class OtlpRead:
    spans: list[OtlpSpan] = field(default_factory=list)
    logs: list[OtlpLog] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    records_read: int = 0


def _span(raw: dict[str, Any], scope: Scope, rec: RawRecord) -> OtlpSpan:
    trace_id = hex_id(raw.get("traceId"), 16)
    span_id = hex_id(raw.get("spanId"), 8)
    if not trace_id or not span_id:
        raise RecordError("invalid_record", "span has no valid traceId/spanId")
    start = unix_nanos(raw.get("startTimeUnixNano"))
    if start is None:
        raise RecordError("invalid_record", "span has no startTimeUnixNano")
    status = raw.get("status") or {}
    events = [
        {
            "name": e.get("name"),
            "time": unix_nanos(e.get("timeUnixNano")),
            "attributes": attributes(e.get("attributes")),
        }
        for e in raw.get("events") or []
    ]
    links = [
        {
            "trace_id": hex_id(k.get("traceId"), 16),
            "span_id": hex_id(k.get("spanId"), 8),
            "attributes": attributes(k.get("attributes")),
        }
        for k in raw.get("links") or []
    ]
    return OtlpSpan(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=hex_id(raw.get("parentSpanId"), 8),
        name=raw.get("name") or "",
        kind=SPAN_KINDS.get(int(raw.get("kind") or 0), str(raw.get("kind"))),
        start=start,
        end=unix_nanos(raw.get("endTimeUnixNano")),
        status_code=STATUS_CODES.get(int(status.get("code") or 0), str(status.get("code"))),
        status_message=status.get("message") or None,
        attributes=attributes(raw.get("attributes")),
        events=events,
        links=links,
        scope=scope,
        line=rec.line,
        byte_offset=rec.byte_offset,
    )


def _log(raw: dict[str, Any], scope: Scope, rec: RawRecord, index: int) -> OtlpLog:
    attrs = attributes(raw.get("attributes"))
    # older SDKs put the event name in the attribute event.name
    name = raw.get("eventName") or attrs.get("event.name")
    return OtlpLog(
        trace_id=hex_id(raw.get("traceId"), 16),
        span_id=hex_id(raw.get("spanId"), 8),
        # the Python SDK leaves timeUnixNano unset; the observed time is the fallback
        time=unix_nanos(raw.get("timeUnixNano")) or unix_nanos(raw.get("observedTimeUnixNano")),
        event_name=name,
        body=any_value(raw.get("body")),
        attributes=attrs,
        severity=raw.get("severityText") or None,
        scope=scope,
        line=rec.line,
        byte_offset=rec.byte_offset,
        index=index,
    )


def _read_request(rec: RawRecord, out: OtlpRead) -> None:
    value = rec.value
    if not isinstance(value, dict) or not ("resourceSpans" in value or "resourceLogs" in value):
        raise RecordError("invalid_record", "expected an OTLP/JSON request with resourceSpans or resourceLogs")
    spans: list[OtlpSpan] = []
    logs: list[OtlpLog] = []
    for resource_spans in value.get("resourceSpans") or []:
        resource = attributes((resource_spans.get("resource") or {}).get("attributes"))
        for scope_spans in resource_spans.get("scopeSpans") or resource_spans.get("instrumentationLibrarySpans") or []:
            s = scope_spans.get("scope") or scope_spans.get("instrumentationLibrary") or {}
            scope = Scope(resource, s.get("name"), s.get("version"), scope_spans.get("schemaUrl"))
            spans += [_span(raw, scope, rec) for raw in scope_spans.get("spans") or []]
    for resource_logs in value.get("resourceLogs") or []:
        resource = attributes((resource_logs.get("resource") or {}).get("attributes"))
        for scope_logs in resource_logs.get("scopeLogs") or []:
            s = scope_logs.get("scope") or {}
            scope = Scope(resource, s.get("name"), s.get("version"), scope_logs.get("schemaUrl"))
            for raw in scope_logs.get("logRecords") or []:
                logs.append(_log(raw, scope, rec, len(logs)))
    out.spans += spans
    out.logs += logs


def read(data: bytes, *, lines: bool) -> OtlpRead:
    """Every span and log record of an OTLP/JSON object; a bad request line is one problem."""
    out = OtlpRead()

    def handle(item: RawRecord) -> None:
        try:
            _read_request(item, out)
        except (TypeError, ValueError, AttributeError) as e:
            raise RecordError("invalid_record", f"malformed OTLP/JSON ({type(e).__name__})") from None

    each_record(json_records(data, lines=lines), out, handle)
    return out


def looks_like(record: Any) -> bool:
    return isinstance(record, dict) and ("resourceSpans" in record or "resourceLogs" in record)
