"""Arize Phoenix span exports: ``px.Client().get_spans_dataframe()`` (or a trace
dataset) written to Parquet, JSON or JSON Lines.

Phoenix unflattens OpenInference attributes into columns: ``context.span_id``,
``context.trace_id``, ``parent_id``, ``span_kind``, ``start_time``,
``end_time``, ``status_code``, ``attributes.llm.input_messages`` (a list of
``{"message.role": ..., "message.content": ...}``), and so on. They are
flattened back to OpenInference attribute names and read as spans of that
dialect, so a span exported both through OTLP and from Phoenix is one call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipelines.formats import otlp_json
from pipelines.formats.base import Normalized, RawRecord, SourceRef, each_record, parse_time, table_records
from pipelines.formats.otlp import OtlpSpan, Scope, hex_id
from pipelines.record.canonical import canonical_json
from pipelines.record.rows import RecordError, span_for_call

FORMAT = "phoenix"
ATTRIBUTES = "attributes."
SCOPE = Scope(resource={}, name="phoenix.export", version=None)


def flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    """Nested lists and dicts back to dotted OpenInference keys (``llm.input_messages.0.message.role``)."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            flatten(f"{prefix}.{key}", inner, out)
    elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        for i, inner in enumerate(value):
            flatten(f"{prefix}.{i}", inner, out)
    elif value is not None:
        out[prefix] = value


def _span(row: Mapping[str, Any], line: int) -> OtlpSpan:
    attrs: dict[str, Any] = {}
    for key, value in row.items():
        if key.startswith(ATTRIBUTES):
            flatten(key[len(ATTRIBUTES) :], value, attrs)
    if row.get("span_kind") and "openinference.span.kind" not in attrs:
        attrs["openinference.span.kind"] = row["span_kind"]
    trace_id = hex_id(str(row.get("context.trace_id") or ""), 16)
    span_id = hex_id(str(row.get("context.span_id") or ""), 8)
    start = parse_time(row.get("start_time"), "start_time")
    if not trace_id or not span_id or start is None:
        raise RecordError("missing_field", "span row has no context.trace_id, context.span_id or start_time")
    status = str(row.get("status_code") or "UNSET").upper()
    events = row.get("events")
    return OtlpSpan(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=hex_id(str(row.get("parent_id") or ""), 8),
        name=str(row.get("name") or ""),
        kind=str(row.get("span_kind") or "UNKNOWN"),
        start=start,
        end=parse_time(row.get("end_time"), "end_time"),
        status_code=status,
        status_message=row.get("status_message") or None,
        attributes=attrs,
        events=[
            {
                "name": e.get("name"),
                "time": parse_time(e.get("timestamp"), "event time"),
                "attributes": e.get("attributes") or {},
            }
            for e in events
            if isinstance(e, Mapping)
        ]
        if isinstance(events, list)
        else [],
        links=[],
        scope=SCOPE,
        line=line,
        byte_offset=0,
    )


def normalize(data: bytes, source: SourceRef, *, lines: bool = False) -> Normalized:
    out = Normalized()

    def handle(item: RawRecord) -> None:
        if not isinstance(item.value, dict):
            raise RecordError("wrong_type", f"expected a span row object, got {type(item.value).__name__}")
        span = _span(item.value, item.line)
        fmt = otlp_json.dialect(span)
        kind = otlp_json.span_kind(span, fmt)
        feedback = otlp_json.feedback_fragments(span, fmt, kind)
        if kind == "llm_call":
            call = otlp_json.build_call(span, fmt, source)
            attributes = canonical_json({"name": span.name, "attributes": span.attributes})
            out.calls.append(call)
            out.spans.append(span_for_call(call, attributes_json=attributes))
        else:
            row, fragment = otlp_json.span_row(span, fmt, kind, source), otlp_json.fragment_for(span, fmt, kind)
            out.spans.append(row)
            if fragment is not None:
                out.fragments.append(fragment)
        out.fragments += feedback

    each_record(table_records(data, lines=lines), out, handle)
    return out


def looks_like(record: Any) -> bool:
    return isinstance(record, dict) and "context.span_id" in record
