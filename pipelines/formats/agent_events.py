"""Agent event logs (JSON Lines): one event per line.

Every event becomes a span. ``llm.call`` events also become calls, carrying
the ``tool.invoke`` results that fed them. ``session.start`` supplies the
user, service, segment and agent version of the session's calls; the
`traces` rollup reads the rest from `spans`. Every payload field is kept: in
the span's ``attributes_json`` and, for fields with no column, the call's
``extra_json``. The lines of a session need not be in order.

Two payload shapes per event type are read (README.md in this folder):

- ``session.start``: user_id, service, environment, segment, tags; or (as
  agents write it) user_message, agent_version, model
- ``llm.call``: a frozen-call v1 document without its ids and timestamp
  (model as an object, request, response, usage, ...); or model, provider,
  temperature, max_tokens, prompt (the message array, system included),
  response (text), stop_reason, prompt_tokens, completion_tokens, cost_usd,
  latency_ms
- ``tool.invoke``: tool_call_id, name, arguments, result, is_error,
  duration_ms; or tool_name, arguments, result (any JSON), duration_ms,
  error, http_status, linked to its llm.call by ``parent_event_id``
- ``agent.think``: text
- ``state.mutate``: key, value (and anything else)
- ``session.end``: outcome (success, failure, abandoned, escalated), feedback;
  or final_response, total_steps, total_tokens, total_cost_usd, or
  terminated + reason
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from pipelines.formats import frozen_call
from pipelines.formats.base import (
    UNEXPECTED,
    Normalized,
    Problem,
    RawRecord,
    SourceRef,
    UtcDatetime,
    each_record,
    json_records,
    unexpected_problem,
    validated_object,
    validation_message,
)
from pipelines.record.canonical import canonical_json
from pipelines.record.rows import RecordError, finalize_call, finalize_span, new_span, span_for_call

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
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    tool_call_id: str | None = None
    name: str = Field(validation_alias=pydantic.AliasChoices("name", "tool_name"))
    arguments: Any = None
    result: Any = None
    is_error: bool = False
    error: Any = None
    http_status: int | None = Field(None, ge=100, le=599)
    duration_ms: float | None = Field(None, ge=0, allow_inf_nan=False)

    @property
    def failed(self) -> bool:
        return self.is_error or self.error not in (None, "", False) or (self.http_status or 0) >= 400


SESSION_FIELDS = ("user_id", "service", "environment", "segment", "tags", "agent_version")
PROMPT_ROLES = ("system", "user", "assistant", "tool")
# fields of the prompt-array llm.call shape that map onto frozen-call fields
PROMPT_SHAPE_FIELDS = (
    "model",
    "provider",
    "temperature",
    "max_tokens",
    "prompt",
    "response",
    "stop_reason",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "latency_ms",
)


def is_prompt_shape(payload: dict[str, Any]) -> bool:
    """The llm.call payload agents write: ``model`` a name and ``prompt`` a message array."""
    # a frozen-call payload's ``prompt`` is its template reference (an object), its ``model`` an object
    return isinstance(payload.get("model"), str) or isinstance(payload.get("prompt"), list)


def _messages(prompt: Any) -> tuple[str | None, list[dict[str, Any]]]:
    if not isinstance(prompt, list):
        raise RecordError("invalid_record", "llm.call payload: prompt must be an array of {role, content} messages")
    system, messages = [], []
    for i, message in enumerate(prompt):
        if not isinstance(message, dict) or message.get("role") not in PROMPT_ROLES:
            raise RecordError(
                "invalid_record", f"llm.call payload: prompt[{i}] needs a role of {', '.join(PROMPT_ROLES)}"
            )
        content = message.get("content")
        if not isinstance(content, str | list | type(None)):
            raise RecordError("invalid_record", f"llm.call payload: prompt[{i}].content must be text or blocks")
        if message["role"] == "system":
            system.append(content if isinstance(content, str) else canonical_json(content))
            continue
        # a tool message (OpenAI style) is input the model read: it stays a user-side turn, named
        role = "user" if message["role"] == "tool" else message["role"]
        messages.append({**message, "role": role, "content": content if content is not None else ""})
    return ("\n\n".join(system) if system else None), messages


def prompt_document(payload: dict[str, Any]) -> dict[str, Any]:
    """A prompt-array llm.call payload as a frozen-call v1 document (without
    ids and time); fields it does not map stay on the document (-> extra_json)."""
    system, messages = _messages(payload.get("prompt"))
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise RecordError("missing_field", "llm.call payload has no model name")
    request = {
        "model": model,
        "max_tokens": payload.get("max_tokens"),
        "temperature": payload.get("temperature"),
        "system": system,
        "messages": messages,
    }
    doc: dict[str, Any] = {k: v for k, v in payload.items() if k not in PROMPT_SHAPE_FIELDS}
    doc["model"] = {"id": model, **({"provider": payload["provider"]} if payload.get("provider") else {})}
    doc["request"] = {k: v for k, v in request.items() if v is not None}
    response = payload.get("response")
    if isinstance(response, str):
        doc["response"] = {"content": [{"type": "text", "text": response}], "stop_reason": payload.get("stop_reason")}
    elif isinstance(response, dict):
        doc["response"] = {**response, "stop_reason": response.get("stop_reason", payload.get("stop_reason"))}
    elif response is not None:
        raise RecordError("invalid_record", "llm.call payload: response must be text or a response object")
    elif payload.get("stop_reason") is not None:
        doc["finish_reason"] = payload["stop_reason"]
    usage = {"input_tokens": payload.get("prompt_tokens"), "output_tokens": payload.get("completion_tokens")}
    if any(v is not None for v in usage.values()):
        doc["usage"] = usage
    for key in ("cost_usd", "latency_ms"):
        if payload.get(key) is not None:
            doc[key] = payload[key]
    if isinstance(doc.get("error"), str):
        doc["error"] = {"type": "error", "message": doc["error"]}
    return doc


def _event(raw: RawRecord) -> AgentEvent:
    return validated_object(AgentEvent, raw.value, "an agent event")


def _tool(event: AgentEvent) -> ToolInvoke:
    try:
        return ToolInvoke.model_validate(event.payload)
    except pydantic.ValidationError as e:
        raise RecordError("invalid_record", f"tool.invoke payload: {validation_message(e)}") from None


def _span(
    event: AgentEvent,
    raw: RawRecord,
    source: SourceRef,
    session: dict[str, Any],
    tool: ToolInvoke | None = None,
) -> dict[str, Any]:
    """The span of a non-llm event; ``tool``: a tool.invoke's payload, when already validated."""
    payload = event.payload
    ended = None
    tool_name = None
    failed = bool(payload.get("is_error") or payload.get("error"))
    if event.event_type == "tool.invoke":
        tool = tool or _tool(event)
        tool_name, failed = tool.name, tool.failed
        if tool.duration_ms is not None:
            ended = event.timestamp + timedelta(milliseconds=tool.duration_ms)
    elif event.event_type == "session.end" and payload.get("terminated"):
        failed = True
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
            status="error" if failed else "ok",
            tool_name=tool_name,
            attributes_json=canonical_json(attributes) if attributes else None,
        )
    )


def _call(
    event: AgentEvent, raw: RawRecord, source: SourceRef, session: dict[str, Any], tools: dict[str, dict]
) -> dict:
    payload = prompt_document(event.payload) if is_prompt_shape(event.payload) else dict(event.payload)
    for name in SESSION_FIELDS[:-1]:
        if payload.get(name) is None and session.get(name) is not None:
            payload[name] = session[name]
    if payload.get("service_sha") is None and session.get("agent_version") is not None:
        payload["service_sha"] = str(session["agent_version"])  # the agent's release
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


def _execution_row(event: AgentEvent, tool: ToolInvoke) -> dict[str, Any]:
    return {
        "span_id": event.event_id,
        "tool_call_id": tool.tool_call_id,
        "name": tool.name,
        "arguments_json": None if tool.arguments is None else canonical_json(tool.arguments),
        "result_json": None if tool.result is None else canonical_json(tool.result),
        "is_error": tool.failed,
        "started_at": event.timestamp,
        "ended_at": event.timestamp + timedelta(milliseconds=tool.duration_ms or 0),
    }


def _attach_linked_tools(calls: list[tuple[AgentEvent, dict]], linked: list[tuple[AgentEvent, ToolInvoke]]) -> None:
    """Tools without a tool call id (linked to the llm.call that asked for
    them by parent_event_id) go on the next llm.call of the session: the one
    their result fed. A tool after the session's last call fed nothing; its span keeps it."""
    by_session: dict[str, list[tuple[AgentEvent, dict]]] = defaultdict(list)
    for event, call in calls:
        by_session[event.session_id].append((event, call))
    changed = {}
    for event, tool in linked:
        later = [
            (e, c)
            for e, c in by_session.get(event.session_id, [])
            if (e.step_index, e.timestamp) > (event.step_index, event.timestamp)
        ]
        if not later:
            continue
        _, call = min(later, key=lambda ec: (ec[0].step_index, ec[0].timestamp))
        have = call.get("tool_executions") or []
        if all(t.get("span_id") != event.event_id for t in have):
            call["tool_executions"] = [*have, _execution_row(event, tool)]
            changed[id(call)] = call
    for call in changed.values():
        finalize_call(call)


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
    linked: list[tuple[AgentEvent, ToolInvoke]] = []
    validated: dict[int, ToolInvoke] = {}  # by id(event): each payload validated once
    for event, _ in events:
        if event.event_type == "session.start":
            sessions[event.session_id] = {k: event.payload.get(k) for k in SESSION_FIELDS}
        elif event.event_type == "tool.invoke":
            try:
                tool = validated[id(event)] = _tool(event)
            except RecordError:
                continue  # reported when its span is built below
            if tool.tool_call_id:
                tools[tool.tool_call_id] = frozen_call.ToolExecution(
                    tool_call_id=tool.tool_call_id,
                    name=tool.name,
                    arguments=tool.arguments,
                    result=tool.result,
                    is_error=tool.failed,
                    started_at=event.timestamp,
                    ended_at=event.timestamp + timedelta(milliseconds=tool.duration_ms or 0),
                )
            else:
                linked.append((event, tool))

    calls: list[tuple[AgentEvent, dict]] = []
    for event, raw in events:
        session = sessions.get(event.session_id, {})
        try:
            if event.event_type == "llm.call":
                call = _call(event, raw, source, session, tools)
                calls.append((event, call))
            else:
                out.spans.append(_span(event, raw, source, session, validated.get(id(event))))
        except RecordError as e:
            out.problems.append(Problem(e.error_class, e.message, raw.line, raw.byte_offset))
        except UNEXPECTED as e:
            out.problems.append(unexpected_problem(e, raw))
    _attach_linked_tools(calls, linked)
    for event, call in calls:
        out.calls.append(call)
        out.spans.append(span_for_call(call, step_index=event.step_index, attributes_json=_call_attributes(event)))
    return out


def _call_attributes(event: AgentEvent) -> str | None:
    # the span keeps the payload's own fields, not the content the call row holds
    content = ("prompt", "response", "request", "retrieval", "tool_executions", "output_text")
    attributes = {k: v for k, v in event.payload.items() if k not in content}
    if event.model_extra:
        attributes["_extra"] = event.model_extra
    return canonical_json(attributes) if attributes else None


def looks_like(record: Any) -> bool:
    return isinstance(record, dict) and "event_type" in record and "event_id" in record
