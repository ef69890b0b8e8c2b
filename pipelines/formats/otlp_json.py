"""The OTLP/JSON format: trace and log exports from OpenTelemetry collectors and SDKs.

One object is one export request (Collector S3 exporter, ``year=/month=/...``
keys) or one request per line (Collector file exporter, the Python OTLP JSON
file exporter). Spans are read in the dialect their attributes are written in:
OpenInference (``openinference.span.kind``), OpenLLMetry's legacy indexed
attributes, or the GenAI semantic conventions (the anthropic SDK's own spans,
the official instrumentation, current OpenLLMetry). ``source_format`` of a row
names the dialect.

Every span becomes a `spans` row and every LLM span a call. Log records
become `spans` rows of kind ``event`` and fragments: content events are joined
onto their span's call, ``gen_ai.evaluation.result`` becomes feedback, by the
batch assembly, since Collectors write logs to other objects than traces.
Tool and retrieval spans become fragments placed on the call they fed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from pipelines.formats import genai_content as gc
from pipelines.formats import openinference, openllmetry, otel_genai, otlp
from pipelines.formats.base import Fragment, Normalized, Problem, SourceRef, known_kind
from pipelines.formats.otlp import OtlpLog, OtlpSpan
from pipelines.record.canonical import canonical_json, sha256_hex
from pipelines.record.rows import (
    RecordError,
    document_row,
    finalize_call,
    finalize_span,
    new_call,
    new_span,
    span_for_call,
)

FORMAT = "otlp_json"
RESOURCE_COLUMNS = {
    "service.name": "service",
    "deployment.environment.name": "environment",
    "deployment.environment": "environment",
    "service.version": "release",
}
ERROR = "ERROR"


def dialect(span: OtlpSpan) -> str:
    attrs = span.attributes
    if openinference.is_openinference(attrs):
        return openinference.FORMAT
    scope = span.scope.name or ""
    traceloop = scope.startswith(openllmetry.SCOPE_PREFIX) and ".genai." not in scope
    if traceloop or otel_genai.is_legacy_indexed(attrs):
        return openllmetry.FORMAT
    return otel_genai.FORMAT


def _scope_name(span: OtlpSpan | OtlpLog) -> str | None:
    if not span.scope.name:
        return None
    return f"{span.scope.name}/{span.scope.version}" if span.scope.version else span.scope.name


def _resource_columns(resource: Mapping[str, Any]) -> dict[str, Any]:
    cols: dict[str, Any] = {}
    for key, column in RESOURCE_COLUMNS.items():
        if resource.get(key) is not None and cols.get(column) is None:
            cols[column] = str(resource[key])
    return cols


def span_kind(span: OtlpSpan, fmt: str) -> str:
    attrs = span.attributes
    if fmt == openinference.FORMAT:
        kind = openinference.span_kind(attrs)
        return {"LLM": "llm_call", "TOOL": "tool", "RETRIEVER": "retrieval", "RERANKER": "retrieval"}.get(
            kind or "", (kind or "other").lower()
        )
    op = otel_genai.operation(span)
    if op in otel_genai.LLM_OPERATIONS:
        return "llm_call"
    return {"execute_tool": "tool", "retrieval": "retrieval", "invoke_agent": "agent"}.get(op or "", op or "other")


def _extra(span: OtlpSpan, mapped, events: list[dict[str, Any]]) -> str | None:
    """Everything the span carried that no column holds, as JSON."""
    unmapped = {k: v for k, v in span.attributes.items() if not mapped(k)}
    extra: dict[str, Any] = {"attributes": unmapped, "resource": span.scope.resource}
    if span.scope.schema_url:
        extra["schema_url"] = span.scope.schema_url
    other = {"name": span.name, "kind": span.kind, "links": span.links, "events": events}
    extra["span"] = {k: v for k, v in other.items() if v}
    return canonical_json(extra)


def _genai_mapped(key: str) -> bool:
    return key in otel_genai.MAPPED or key.startswith(otel_genai.PROMPT_VARIABLE)


def _genai_call(span: OtlpSpan, fmt: str) -> dict[str, Any]:
    attrs = span.attributes
    params, extra_params = otel_genai.params(attrs)
    cols: dict[str, Any] = {
        "provider": otel_genai.provider(attrs),
        "request_model": attrs.get("gen_ai.request.model"),
        "response_model": attrs.get("gen_ai.response.model"),
        "response_id": attrs.get("gen_ai.response.id"),
        "provider_request_id": attrs.get("anthropic.request.id"),
        "previous_response_id": attrs.get("gen_ai.request.previous_response.id"),
        "conversation_id": attrs.get("gen_ai.conversation.id"),
        "session_id": attrs.get("session.id"),
        "user_id": attrs.get("user.id"),
        "params": params,
        "params_extra_json": canonical_json(extra_params) if extra_params else None,
        "usage": otel_genai.usage(attrs),
        "truncated": bool(attrs.get("anthropic.content.truncated")),
        **otel_genai.prompt_template(attrs),
    }
    cols["finish_reason"], cols["stop_reason_native"] = otel_genai.finish_reasons(attrs)
    content = otel_genai.content_columns(attrs)
    for key, value in otel_genai.span_event_content(span.events).items():
        content.setdefault(key, value)
    if fmt == openllmetry.FORMAT:
        for key, value in openllmetry.content_columns(attrs).items():
            content.setdefault(key, value)
        cols.update(openllmetry.context_columns(attrs))
        if cols["request_model"] is None:
            cols["request_model"] = attrs.get("gen_ai.request.model")
    cols.update({k: v for k, v in content.items() if v is not None})
    if cols.get("messages") and cols.get("provider") in (None, "anthropic"):
        sampling = {k: v for k, v in params.items() if v is not None}
        request = gc.anthropic_request(
            cols["request_model"], cols.get("system_text"), cols["messages"], cols.get("tool_definitions"), sampling
        )
        if request is not None:
            cols["request_json"] = canonical_json(request)
            cols["flags"] = ["request_reconstructed"]
    return cols


def _status(span: OtlpSpan) -> dict[str, Any]:
    failed = span.status_code == ERROR or span.attributes.get("error.type") is not None
    return {
        "status": "error" if failed else "ok",
        "error_type": span.attributes.get("error.type") or (span.status_code if failed else None),
        "error_message": span.status_message if failed else None,
    }


def build_call(span: OtlpSpan, fmt: str, source: SourceRef) -> dict[str, Any]:
    if fmt == openinference.FORMAT:
        cols = openinference.call_columns(span.attributes)
        mapped = openinference.is_mapped
    else:
        cols = _genai_call(span, fmt)
        mapped = (
            (lambda k: _genai_mapped(k) or openllmetry.is_mapped(k)) if fmt == openllmetry.FORMAT else _genai_mapped
        )
    unconsumed = [
        {**e, "time": str(e["time"])}
        for e in span.events
        if e["name"] not in ("gen_ai.content.prompt", "gen_ai.content.completion", otel_genai.EVALUATION_EVENT)
    ]
    call = new_call(
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_span_id=span.parent_span_id,
        source_format=fmt,
        source_uri=source.uri,
        source_etag=source.etag,
        source_line=span.line,
        occurred_at=span.start,
        ended_at=span.end,
        endpoint=span.attributes.get("url.full") or span.attributes.get("server.address"),
        instrumentation_scope=_scope_name(span),
        extra_json=_extra(span, mapped, unconsumed),
        **_resource_columns(span.scope.resource),
        **_status(span),
    )
    call.update({k: v for k, v in cols.items() if v is not None})
    return finalize_call(call)


def fragment_for(span: OtlpSpan, fmt: str, kind: str) -> Fragment | None:
    attrs = span.attributes
    failed = _status(span)["status"] == "error"
    if kind == "tool":
        if fmt == openinference.FORMAT:
            payload = openinference.tool_execution(attrs, span.span_id, span.start, span.end, failed)
        else:
            result = attrs.get("gen_ai.tool.call.result", attrs.get("anthropic.tool_result.content"))
            payload = {
                "span_id": span.span_id,
                "tool_call_id": attrs.get("gen_ai.tool.call.id"),
                "name": attrs.get("gen_ai.tool.name"),
                "arguments_json": gc.json_or_none(gc.parse_json(attrs.get("gen_ai.tool.call.arguments"))),
                "result_json": gc.json_or_none(gc.parse_json(result)),
                "is_error": failed,
                "started_at": span.start,
                "ended_at": span.end,
            }
        return Fragment("tool_execution", span.trace_id, None, payload, span.parent_span_id, span.end or span.start)
    if kind == "retrieval":
        if fmt == openinference.FORMAT:
            payload = openinference.retrieval(attrs)
        else:
            docs = gc.parse_json(attrs.get("gen_ai.retrieval.documents")) or []
            payload = {
                "embedding_model": attrs.get("gen_ai.request.model"),
                "index_snapshot": attrs.get("gen_ai.data_source.id"),
                "query_text": attrs.get("gen_ai.retrieval.query.text"),
                # semconv documents carry no content: the text was not captured
                "documents": [
                    document_row(d.get("id"), rank, d.get("score"), d.get("content"))
                    for rank, d in enumerate(docs if isinstance(docs, list) else [], start=1)
                    if isinstance(d, Mapping)
                ],
            }
        return Fragment("retrieval", span.trace_id, None, payload, span.parent_span_id, span.start)
    return None


def span_row(span: OtlpSpan, fmt: str, kind: str, source: SourceRef) -> dict[str, Any]:
    attrs = span.attributes
    usage = otel_genai.usage(attrs) or {}
    return finalize_span(
        new_span(
            trace_id=span.trace_id,
            span_id=span.span_id,
            parent_span_id=span.parent_span_id,
            session_id=attrs.get("session.id"),
            user_id=attrs.get("user.id"),
            source_format=fmt,
            source_uri=source.uri,
            source_etag=source.etag,
            source_line=span.line,
            kind=known_kind(kind),
            name=span.name,
            occurred_at=span.start,
            ended_at=span.end,
            status=_status(span)["status"],
            tool_name=attrs.get("gen_ai.tool.name") or attrs.get("tool.name"),
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
            attributes_json=canonical_json(
                {"attributes": attrs, "events": [{**e, "time": str(e["time"])} for e in span.events]}
            ),
        )
    )


def feedback_fragments(span: OtlpSpan, fmt: str, kind: str) -> list[Fragment]:
    out = []
    for i, event in enumerate(span.events):
        if event["name"] == otel_genai.EVALUATION_EVENT:
            key = f"{span.trace_id}|{span.span_id}|event|{i}"
            item = otel_genai.evaluation_feedback(event["attributes"], event["time"], "otel:evaluation", key)
            out.append(Fragment("feedback", span.trace_id, span.span_id, item))
    if fmt == openinference.FORMAT:
        # an annotation on an LLM span judges that call; on another span, the trace's answer
        target = span.span_id if kind == "llm_call" else None
        for item in openinference.annotations(
            span.attributes, span.end or span.start, f"{span.trace_id}|{span.span_id}"
        ):
            if target is None:
                item["target_level"] = "trace"
            out.append(Fragment("feedback", span.trace_id, target, item))
    return out


def _log_rows(logs: list[OtlpLog], source: SourceRef) -> tuple[list[dict[str, Any]], list[Fragment], list[Problem]]:
    rows, fragments, problems = [], [], []
    by_span: dict[tuple[str, str], list[OtlpLog]] = defaultdict(list)
    for log in logs:
        linked = log.trace_id is not None and log.span_id is not None
        # a record tied to no span keeps a trace of its own, so it is still queryable
        trace_id = log.trace_id or sha256_hex(f"{source.key}|{log.line}")[:32]
        span_id = sha256_hex(f"{source.key}|{log.line}|{log.index}")[:16]
        if log.time is None:
            problems.append(
                Problem("invalid_record", "log record has neither timeUnixNano nor observedTimeUnixNano", log.line)
            )
            continue
        rows.append(
            finalize_span(
                new_span(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_span_id=log.span_id,
                    source_format=FORMAT,
                    source_uri=source.uri,
                    source_etag=source.etag,
                    source_line=log.line,
                    kind="other",  # a log record: its event name is the row name
                    name=log.event_name,
                    occurred_at=log.time,
                    status="ok",
                    attributes_json=canonical_json(
                        {"attributes": log.attributes, "body": log.body, "scope": _scope_name(log)}
                    ),
                )
            )
        )
        if not linked:
            continue
        if log.event_name in otel_genai.CONTENT_EVENTS:
            by_span[(log.trace_id, log.span_id)].append(log)
        elif log.event_name == otel_genai.EVALUATION_EVENT:
            key = f"{source.key}|{log.line}|{log.index}"
            item = otel_genai.evaluation_feedback(log.attributes, log.time, "otel:evaluation", key)
            fragments.append(Fragment("feedback", log.trace_id, log.span_id, item))
    for (trace_id, span_id), group in by_span.items():
        content = otel_genai.content_from_log_events(group)
        if content:
            fragments.append(Fragment("content", trace_id, span_id, content, at=group[0].time))
    return rows, fragments, problems


def normalize(data: bytes, source: SourceRef, *, lines: bool = False) -> Normalized:
    read = otlp.read(data, lines=lines)
    out = Normalized(problems=read.problems, records_read=read.records_read)
    bad_lines: set[int] = set()
    for span in read.spans:
        if span.line in bad_lines:
            continue
        fmt = dialect(span)
        kind = span_kind(span, fmt)
        try:
            if kind == "llm_call":
                call = build_call(span, fmt, source)
                out.calls.append(call)
                out.spans.append(
                    span_for_call(
                        call, attributes_json=canonical_json({"name": span.name, "attributes": span.attributes})
                    )
                )
            else:
                out.spans.append(span_row(span, fmt, kind, source))
                fragment = fragment_for(span, fmt, kind)
                if fragment is not None:
                    out.fragments.append(fragment)
            out.fragments += feedback_fragments(span, fmt, kind)
        except RecordError as e:
            bad_lines.add(span.line)
            out.problems.append(Problem(e.error_class, e.message, span.line, span.byte_offset))
    rows, fragments, problems = _log_rows(read.logs, source)
    out.spans += rows
    out.fragments += fragments
    out.problems += problems
    if bad_lines:
        # a request line with a bad span is quarantined whole: drop what it gave
        out.calls = [c for c in out.calls if c["source_line"] not in bad_lines]
        out.spans = [s for s in out.spans if s["source_line"] not in bad_lines]
    return out


def looks_like(record: Any) -> bool:
    return otlp.looks_like(record)
