"""Agent event logs (JSON Lines): one event per line.

Every event becomes a span. ``llm.call`` events also become calls, carrying
the ``tool.invoke`` results that fed them (matched by tool call id within the
object). ``session.start`` supplies the user, service and segment of the
session's calls; the `traces` rollup reads the rest from `spans`.

Event payloads by type:

- ``session.start``: user_id, service, environment, segment, tags
- ``llm.call``: a frozen-call v1 document without its ids and timestamp
  (model, request, response, prompt, retrieval, usage, latency_ms, ...)
- ``tool.invoke``: tool_call_id, name, arguments, result, is_error, duration_ms
- ``agent.think``: text
- ``state.mutate``: key, value (and anything else)
- ``session.end``: outcome (success, failure, abandoned, escalated), feedback
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from pipelines.formats import frozen_call
from pipelines.formats.base import (
    Normalized,
    Problem,
    RawRecord,
    SourceRef,
    UtcDatetime,
    each_record,
    json_records,
    validation_message,
)
from pipelines.record.canonical import canonical_json
from pipelines.record.rows import RecordError, finalize_span, new_span, span_for_call

FORMAT = "agent_events"

SPAN_KINDS = {
    "session.start": "session_start",
    "llm.call": "llm_call",
    "tool.invoke": "tool",
    "agent.think": "think",
    "state.mutate": "state",
    "session.end": "session_end",
}
EventType = Literal["session.start", "llm.call", "tool.invoke", "agent.think", "state.mutate", "session.end"]


class AgentEvent(BaseModel):
    model_config = ConfigDict(extra="allow")

    event_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    trace_id: str = Field(min_length=1)
    step_index: int = Field(ge=0)
    timestamp: UtcDatetime
    event_type: EventType
    payload: dict[str, Any] = Field(default_factory=dict)
    parent_event_id: str | None = None


class ToolInvoke(BaseModel):
    model_config = ConfigDict(extra="allow")
    tool_call_id: str | None = None
    name: str
    arguments: Any = None
    result: Any = None
    is_error: bool = False
    duration_ms: float | None = None


SESSION_FIELDS = ("user_id", "service", "environment", "segment", "tags")


def _event(raw: RawRecord) -> AgentEvent:
    if not isinstance(raw.value, dict):
        raise RecordError("wrong_type", f"expected a JSON object, got {type(raw.value).__name__}")
    try:
        return AgentEvent.model_validate(raw.value)
    except pydantic.ValidationError as e:
        raise RecordError("invalid_record", f"not an agent event: {validation_message(e)}") from None


def _tool(event: AgentEvent) -> ToolInvoke:
    try:
        return ToolInvoke.model_validate(event.payload)
    except pydantic.ValidationError as e:
        raise RecordError("invalid_record", f"tool.invoke payload: {validation_message(e)}") from None


def _span(event: AgentEvent, raw: RawRecord, source: SourceRef, session: dict[str, Any]) -> dict[str, Any]:
    payload = event.payload
    ended = None
    tool_name = None
    if event.event_type == "tool.invoke":
        tool = _tool(event)
        tool_name = tool.name
        if tool.duration_ms is not None:
            ended = event.timestamp + timedelta(milliseconds=tool.duration_ms)
    status = "error" if payload.get("is_error") or payload.get("error") else "ok"
    extra = event.model_extra or {}
    attributes = {**payload, **({"_extra": extra} if extra else {})}
    return finalize_span(
        new_span(
            trace_id=event.trace_id,
            span_id=event.event_id,
            parent_span_id=event.parent_event_id,
            session_id=event.session_id,
            user_id=session.get("user_id"),
            source_format=FORMAT,
            source_uri=source.uri,
            source_etag=source.etag,
            source_line=raw.line,
            kind=SPAN_KINDS[event.event_type],
            name=event.event_type,
            step_index=event.step_index,
            occurred_at=event.timestamp,
            ended_at=ended,
            status=status,
            tool_name=tool_name,
            attributes_json=canonical_json(attributes) if attributes else None,
        )
    )


def _call(
    event: AgentEvent, raw: RawRecord, source: SourceRef, session: dict[str, Any], tools: dict[str, dict]
) -> dict:
    payload = dict(event.payload)
    for name in SESSION_FIELDS:
        if payload.get(name) is None and session.get(name) is not None:
            payload[name] = session[name]
    payload.update(
        trace_id=event.trace_id,
        span_id=event.event_id,
        parent_span_id=event.parent_event_id,
        session_id=event.session_id,
        occurred_at=event.timestamp,
    )
    try:
        doc = frozen_call.FrozenCallV1.model_validate(payload)
    except pydantic.ValidationError as e:
        raise RecordError("invalid_record", f"llm.call payload: {validation_message(e)}") from None
    fed_by = _tool_result_ids(doc.request or {})
    if fed_by and doc.tool_executions is None:
        doc.tool_executions = [tools[i] for i in fed_by if i in tools] or None
    return frozen_call.to_call(doc, source, raw.line, source_format=FORMAT)


def _tool_result_ids(request: dict[str, Any]) -> list[str]:
    ids = []
    for message in request.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            ids += [b.get("tool_use_id") for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return [i for i in ids if i]


def normalize(data: bytes, source: SourceRef, *, lines: bool = True) -> Normalized:
    out = Normalized()
    events: list[tuple[AgentEvent, RawRecord]] = []
    each_record(json_records(data, lines=lines), out, lambda item: events.append((_event(item), item)))

    # Session context and tool results first: an llm.call needs both, and the
    # lines of one session need not be in order.
    sessions: dict[str, dict[str, Any]] = {}
    tools: dict[str, dict[str, Any]] = {}
    for event, _ in events:
        if event.event_type == "session.start":
            sessions[event.session_id] = {k: event.payload.get(k) for k in SESSION_FIELDS}
        elif event.event_type == "tool.invoke":
            try:
                tool = _tool(event)
            except RecordError:
                continue  # reported when its span is built below
            if tool.tool_call_id:
                tools[tool.tool_call_id] = frozen_call.ToolExecution(
                    tool_call_id=tool.tool_call_id,
                    name=tool.name,
                    arguments=tool.arguments,
                    result=tool.result,
                    is_error=tool.is_error,
                    started_at=event.timestamp,
                    ended_at=event.timestamp + timedelta(milliseconds=tool.duration_ms or 0),
                )

    for event, raw in events:
        session = sessions.get(event.session_id, {})
        try:
            if event.event_type == "llm.call":
                call = _call(event, raw, source, session, tools)
                out.calls.append(call)
                out.spans.append(span_for_call(call, step_index=event.step_index))
            else:
                out.spans.append(_span(event, raw, source, session))
        except RecordError as e:
            out.problems.append(Problem(e.error_class, e.message, raw.line, raw.byte_offset))
    return out


def looks_like(record: Any) -> bool:
    return isinstance(record, dict) and "event_type" in record and "event_id" in record
