"""A trace as an ordered list of steps, from the stored `spans` and `calls` rows of any format.

Every detector, the state validator and the `agent_events` table read this one
shape. Sources spell the same fact differently (an agent log's ``result``, an
OpenTelemetry ``gen_ai.tool.call.result``, OpenInference's ``output.value``), so
a fact is looked up under each spelling, in the span's attributes and in the
call row; a step keeps only what the source recorded (absent stays ``None``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

EVENT_TYPES = {
    "session_start": "session.start",
    "llm_call": "llm.call",
    "tool": "tool.invoke",
    "retrieval": "tool.invoke",
    "think": "agent.think",
    "state": "state.mutate",
    "session_end": "session.end",
}

RESULT_KEYS = ("result", "output", "gen_ai.tool.call.result", "output.value", "outputs", "tool.result")
ARGUMENT_KEYS = ("arguments", "input", "args", "gen_ai.tool.call.arguments", "input.value", "inputs", "tool.parameters")
ERROR_KEYS = ("error", "error.type", "exception.message", "error_message")
HTTP_KEYS = ("http_status", "http.status_code", "http.response.status_code", "status_code")
TOOL_NAME_KEYS = ("tool_name", "name", "gen_ai.tool.name", "tool.name")
TOOL_CALL_ID_KEYS = ("tool_call_id", "gen_ai.tool.call.id", "tool_use_id", "tool.id")
TEXT_KEYS = ("text", "thought", "content")
SESSION_KEYS = ("agent_version", "user_tier", "feature_flag")


@dataclass
class Step:
    """One event of a trace, with the facts detectors need."""

    trace_id: str
    session_id: str | None
    span_key: str
    span_id: str
    parent_span_id: str | None
    event_type: str
    ts: datetime
    raw_step_index: int | None
    source_format: str | None
    step_index: int = 0
    call_id: str | None = None
    status: str | None = None
    model: str | None = None
    provider: str | None = None
    service: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    latency_ms: float | None = None
    tool_called: str | None = None
    tool_call_id: str | None = None
    tool_arguments: Any = None
    tool_result: Any = None
    tool_error: str | None = None
    http_status: int | None = None
    tool_success: bool | None = None
    text: str | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    semantic_error: str | None = None
    agent_version: str | None = None
    user_tier: str | None = None
    feature_flag: str | None = None
    # the request's messages and the output's tool_use blocks (llm.call): for the state validator
    messages: list[dict] = field(default_factory=list)
    output_tool_uses: list[dict] = field(default_factory=list)
    retrieved: list[str] = field(default_factory=list)
    # session.end: the total tokens the source reported for the session, if any
    reported_total_tokens: int | None = None
    feedback_negative: bool = False
    escalated: bool = False
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trace:
    trace_id: str
    session_id: str | None
    steps: list[Step]

    @property
    def service(self) -> str | None:
        return next((s.service for s in self.steps if s.service), None)

    @property
    def cost_usd(self) -> float:
        return sum(s.cost_usd or 0.0 for s in self.steps if s.event_type == "llm.call")

    @property
    def calls(self) -> list[Step]:
        return [s for s in self.steps if s.event_type == "llm.call"]


def attribute(attrs: Mapping[str, Any], keys: Iterable[str]) -> Any:
    """The first of ``keys`` present in a span's attributes, at the top or one level down
    (OpenTelemetry's ``attributes``, an agent log's ``payload`` / ``_extra``)."""
    layers = [attrs] + [
        attrs[k] for k in ("attributes", "payload", "_extra", "extra") if isinstance(attrs.get(k), dict)
    ]
    for key in keys:
        for layer in layers:
            value = layer.get(key)
            if value is not None:
                return value
    return None


def _json(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in '[{"' or text in ("null", "true", "false"):
            try:
                return json.loads(text)
            except ValueError:
                return value
    return value


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and value != "" else None
    except (TypeError, ValueError):
        return None


def _bool(value: Any) -> bool | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "ok", "success")
    return bool(value)


def _tool_uses(messages: list[dict] | None) -> list[dict]:
    uses = []
    for message in messages or []:
        for part in message.get("parts") or []:
            if part.get("type") == "tool_call":
                uses.append({"id": part.get("tool_call_id"), "name": part.get("tool_name")})
    return uses


def _tool_results(messages: list[dict] | None) -> dict[str, Any]:
    """tool call id -> the result content the model was shown."""
    out = {}
    for message in messages or []:
        for part in message.get("parts") or []:
            if part.get("type") == "tool_result" and part.get("tool_call_id"):
                out[part["tool_call_id"]] = _json(part.get("content_json"))
    return out


def _segment(call: Mapping[str, Any]) -> dict[str, str]:
    segment = call.get("segment") or {}
    return dict(segment) if not isinstance(segment, dict) else segment


def _step(span: Mapping[str, Any], call: Mapping[str, Any] | None) -> Step | None:
    event_type = EVENT_TYPES.get(span["kind"])
    if event_type is None:
        return None
    attrs = json.loads(span.get("attributes_json") or "{}")
    if not isinstance(attrs, dict):
        attrs = {"value": attrs}
    step = Step(
        trace_id=span["trace_id"],
        session_id=span.get("session_id"),
        span_key=span["span_key"],
        span_id=span["span_id"],
        parent_span_id=span.get("parent_span_id"),
        event_type=event_type,
        ts=span["occurred_at"],
        raw_step_index=span.get("step_index"),
        source_format=span.get("source_format"),
        call_id=span.get("call_id"),
        status=span.get("status"),
        tokens_in=span.get("input_tokens"),
        tokens_out=span.get("output_tokens"),
        cost_usd=span.get("cost_usd"),
        latency_ms=span.get("duration_ms"),
        attributes=attrs,
    )
    for key in SESSION_KEYS:
        setattr(step, key, _str(attribute(attrs, (key,))) or _str((attribute(attrs, ("segment",)) or {}).get(key)))
    step.semantic_error = _semantic_error(attribute(attrs, ("semantic_error",)))
    if event_type == "tool.invoke":
        _tool_facts(step, attrs, span)
    elif event_type in ("agent.think",):
        step.text = _str(attribute(attrs, TEXT_KEYS))
    elif event_type == "session.end":
        feedback = str(attribute(attrs, ("feedback",)) or "").lower()
        step.feedback_negative = feedback in ("down", "thumbs_down", "negative", "bad", "unhelpful")
        step.escalated = attribute(attrs, ("outcome",)) == "escalated"
        step.reported_total_tokens = _reported_total(attrs, span)
    if call is not None:
        _call_facts(step, call, attrs)
    elif event_type == "llm.call":
        # a log line that carries the call inline (prompt/response) without a calls row
        step.model = _str(attribute(attrs, ("model", "gen_ai.request.model", "gen_ai.response.model")))
        step.provider = _str(attribute(attrs, ("provider", "gen_ai.system", "gen_ai.provider.name")))
        step.text = _str(attribute(attrs, ("response", "completion", "output_text")))
        step.tokens_in = step.tokens_in or _int(attribute(attrs, ("prompt_tokens", "input_tokens")))
        step.tokens_out = step.tokens_out or _int(attribute(attrs, ("completion_tokens", "output_tokens")))
    return step


def _semantic_error(value: Any) -> str | None:
    """The class a source logged for a step: its name, or "semantic_error" for a bare true."""
    if value is None or value is False:
        return None
    if value is True:
        return "semantic_error"
    text = str(value).strip()
    if text.lower() in ("", "false", "none", "null", "0", "no"):
        return None
    return "semantic_error" if text.lower() in ("true", "1", "yes") else text


def _str(value: Any) -> str | None:
    if value is None or isinstance(value, (dict, list)):
        return None
    return str(value)


def _reported_total(attrs: dict, span: Mapping[str, Any]) -> int | None:
    total = _int(attribute(attrs, ("total_tokens", "tokens_total", "session_total_tokens")))
    if total is not None:
        return total
    parts = [_int(attribute(attrs, (k,))) for k in ("tokens_in", "tokens_out")]
    parts = parts if any(p is not None for p in parts) else [span.get("input_tokens"), span.get("output_tokens")]
    return sum(p or 0 for p in parts) if any(p is not None for p in parts) else None


def _tool_facts(step: Step, attrs: dict, span: Mapping[str, Any]) -> None:
    step.tool_called = span.get("tool_name") or _str(attribute(attrs, TOOL_NAME_KEYS)) or span.get("name")
    step.tool_call_id = _str(attribute(attrs, TOOL_CALL_ID_KEYS))
    step.tool_arguments = _json(attribute(attrs, ARGUMENT_KEYS))
    step.tool_result = _json(attribute(attrs, RESULT_KEYS))
    error = attribute(attrs, ERROR_KEYS)
    step.tool_error = None if error in (None, False, "") else str(error)
    step.http_status = _int(attribute(attrs, HTTP_KEYS))
    explicit = _bool(attribute(attrs, ("tool_success", "success")))
    failed = (
        bool(_bool(attribute(attrs, ("is_error",))))
        or step.tool_error is not None
        or (step.http_status is not None and not 200 <= step.http_status < 300)
        or span.get("status") == "error"
    )
    step.tool_success = explicit if explicit is not None else not failed
    if explicit is True and failed:
        step.tool_success = False  # a logger that says "success" beside an error status is wrong


def _call_facts(step: Step, call: Mapping[str, Any], attrs: dict) -> None:
    usage = call.get("usage") or {}
    segment = _segment(call)
    step.model = call.get("response_model") or call.get("request_model")
    step.provider = call.get("provider")
    step.service = call.get("service")
    step.tokens_in = usage.get("input_tokens") if usage.get("input_tokens") is not None else step.tokens_in
    step.tokens_out = usage.get("output_tokens") if usage.get("output_tokens") is not None else step.tokens_out
    step.cost_usd = usage.get("cost_usd") if usage.get("cost_usd") is not None else step.cost_usd
    step.latency_ms = call.get("latency_ms") if call.get("latency_ms") is not None else step.latency_ms
    step.text = call.get("output_text")
    step.finish_reason = call.get("finish_reason")
    step.response_id = call.get("response_id")
    step.status = call.get("status") or step.status
    step.messages = list(call.get("messages") or [])
    step.output_tool_uses = _tool_uses(call.get("output_messages"))
    docs = (call.get("retrieval") or {}).get("documents") or []
    step.retrieved = [d.get("text") or "" for d in docs]
    step.agent_version = step.agent_version or call.get("release") or segment.get("agent_version")
    step.user_tier = step.user_tier or segment.get("user_tier")
    step.feature_flag = step.feature_flag or segment.get("feature_flag")
    step.escalated = bool(call.get("escalated"))
    for item in call.get("feedback") or []:
        label = str(item.get("value_string") or "").lower()
        thumbs = "thumb" in str(item.get("name") or "").lower() and (item.get("value_number") or 1) <= 0
        step.feedback_negative |= label in ("down", "thumbs_down", "negative", "bad", "unhelpful") or thumbs


def build_traces(spans: Iterable[Mapping[str, Any]], calls: Iterable[Mapping[str, Any]]) -> list[Trace]:
    """Traces from span rows and call rows (dicts with the `spans` / `calls` columns)."""
    by_call = {c["call_id"]: c for c in calls}
    grouped: dict[str, list[Step]] = defaultdict(list)
    for span in spans:
        step = _step(span, by_call.get(span.get("call_id")) if span.get("call_id") else None)
        if step is not None:
            grouped[step.trace_id].append(step)
    traces = []
    for trace_id, steps in sorted(grouped.items()):
        # the source's step numbers where it has them, else time order
        steps.sort(key=lambda s: (s.raw_step_index if s.raw_step_index is not None else 1 << 40, s.ts, s.span_id))
        for i, step in enumerate(steps):
            step.step_index = step.raw_step_index if step.raw_step_index is not None else i
        _fill_tool_results(steps)
        _carry_session_fields(steps)
        session = next((s.session_id for s in steps if s.session_id), None)
        traces.append(Trace(trace_id, session, steps))
    return traces


def _fill_tool_results(steps: list[Step]) -> None:
    """A tool span without its result: take the result a later call was shown."""
    shown: dict[str, Any] = {}
    for step in steps:
        shown.update(_tool_results(step.messages))
    for step in steps:
        if step.event_type == "tool.invoke" and step.tool_result is None and step.tool_call_id in shown:
            step.tool_result = shown[step.tool_call_id]


def _carry_session_fields(steps: list[Step]) -> None:
    """Tier, flag and agent version are session facts: give every step what any step says."""
    for key in SESSION_KEYS:
        value = next((getattr(s, key) for s in steps if getattr(s, key)), None)
        for step in steps:
            if getattr(step, key) is None:
                setattr(step, key, value)
