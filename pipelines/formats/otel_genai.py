"""OpenTelemetry GenAI semantic conventions: span and event attributes -> call columns.

All three generations of content recording are read: attributes
(``gen_ai.input.messages`` ..., >= 1.37, and the structured
``gen_ai.client.inference.operation.details`` event), per-message log events
(1.28-1.36, see ``content_from_log_events``) and span events
(``gen_ai.content.prompt`` / ``.completion``, <= 1.27). Aliases are accepted:
``gen_ai.system`` / ``gen_ai.provider.name``, ``cache_creation`` /
``cache_write``, ``result`` / ``response``. The anthropic SDK's own spans
(scope ``com.anthropic.sdk.python``) use these conventions plus ``anthropic.*``
attributes.

Token counts follow OTel: ``gen_ai.usage.input_tokens`` includes cached
tokens. The `calls` table follows Anthropic (uncached input in
``input_tokens``), so cached counts are subtracted; the reported value stays in
``extra_json``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from pipelines.formats import genai_content as gc
from pipelines.formats.otlp import OtlpLog, OtlpSpan
from pipelines.record.anthropic_shape import normalize_finish_reason
from pipelines.record.canonical import canonical_json, sha256_hex

FORMAT = "otel_genai"

LLM_OPERATIONS = {"chat", "text_completion", "generate_content", "completion"}
SAMPLING = {
    "gen_ai.request.max_tokens": "max_tokens",
    "gen_ai.request.temperature": "temperature",
    "gen_ai.request.top_p": "top_p",
    "gen_ai.request.top_k": "top_k",
    "gen_ai.request.seed": "seed",
    "gen_ai.request.stop_sequences": "stop_sequences",
}
EXTRA_PARAMS = {
    "gen_ai.request.frequency_penalty": "frequency_penalty",
    "gen_ai.request.presence_penalty": "presence_penalty",
    "gen_ai.request.choice.count": "choice_count",
    "gen_ai.request.stream": "stream",
    "gen_ai.request.reasoning.level": "reasoning_level",
    "gen_ai.output.type": "output_type",
    "anthropic.request.service_tier": "service_tier",
    "anthropic.thinking.type": "thinking_type",
    "anthropic.thinking.budget_tokens": "thinking_budget_tokens",
}
CONTENT_ATTRIBUTES = (
    "gen_ai.system_instructions",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.definitions",
)
# Attributes that have a column of their own. Usage counts stay in extra_json
# too, since input_tokens is converted.
MAPPED = {
    *SAMPLING,
    *EXTRA_PARAMS,
    *CONTENT_ATTRIBUTES,
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.response.id",
    "gen_ai.response.finish_reasons",
    "gen_ai.conversation.id",
    "gen_ai.request.previous_response.id",
    "gen_ai.prompt.name",
    "gen_ai.prompt.version",
    "anthropic.request.id",
    "anthropic.message.stop_reason",
    "anthropic.content.truncated",
    "session.id",
    "user.id",
    "error.type",
}
PROMPT_VARIABLE = "gen_ai.prompt.variable."
LEGACY_INDEXED = re.compile(r"^gen_ai\.(prompt|completion)\.\d+\.")

# v1.28-1.36 per-message log events
MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
CHOICE_EVENT = "gen_ai.choice"
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
EVALUATION_EVENT = "gen_ai.evaluation.result"
CONTENT_EVENTS = {*MESSAGE_EVENTS, CHOICE_EVENT, DETAILS_EVENT}


def operation(span: OtlpSpan) -> str | None:
    attrs = span.attributes
    op = attrs.get("gen_ai.operation.name") or attrs.get("llm.request.type")
    if op:
        return str(op)
    if span.name.startswith(("chat ", "anthropic.messages.create", "anthropic.chat")):
        return "chat"
    return None


def is_llm(span: OtlpSpan) -> bool:
    return operation(span) in LLM_OPERATIONS


def provider(attrs: Mapping[str, Any]) -> str | None:
    value = attrs.get("gen_ai.provider.name") or attrs.get("gen_ai.system")
    return str(value).lower() if value else None


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def usage(attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    reported_input = _int(attrs.get("gen_ai.usage.input_tokens", attrs.get("gen_ai.usage.prompt_tokens")))
    output = _int(attrs.get("gen_ai.usage.output_tokens", attrs.get("gen_ai.usage.completion_tokens")))
    cache_read = _int(attrs.get("gen_ai.usage.cache_read.input_tokens"))
    cache_write = _int(
        attrs.get("gen_ai.usage.cache_write.input_tokens", attrs.get("gen_ai.usage.cache_creation.input_tokens"))
    )
    total = _int(attrs.get("gen_ai.usage.total_tokens", attrs.get("llm.usage.total_tokens")))
    if all(v is None for v in (reported_input, output, cache_read, cache_write, total)):
        return None
    uncached = None
    if reported_input is not None:
        uncached = reported_input - (cache_read or 0) - (cache_write or 0)
    if total is None and (reported_input is not None or output is not None):
        total = (reported_input or 0) + (output or 0)
    return {
        "input_tokens": uncached,
        "output_tokens": output,
        "cache_read_input_tokens": cache_read,
        "cache_write_input_tokens": cache_write,
        "total_tokens": total,
        "cost_usd": None,
    }


def params(attrs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(PARAMS row, the other request params) from ``gen_ai.request.*``."""
    row = {name: attrs.get(key) for key, name in SAMPLING.items()}
    if row["stop_sequences"] is not None:
        row["stop_sequences"] = [str(s) for s in row["stop_sequences"]]
    for key in ("max_tokens", "top_k", "seed"):
        row[key] = _int(row[key])
    for key in ("temperature", "top_p"):
        row[key] = None if row[key] is None else float(row[key])
    extra = {name: attrs[key] for key, name in EXTRA_PARAMS.items() if attrs.get(key) is not None}
    return row, extra


def prompt_template(attrs: Mapping[str, Any]) -> dict[str, Any]:
    variables = {k[len(PROMPT_VARIABLE) :]: v for k, v in attrs.items() if k.startswith(PROMPT_VARIABLE)}
    return {
        "template_id": attrs.get("gen_ai.prompt.name"),
        "template_version": None if attrs.get("gen_ai.prompt.version") is None else str(attrs["gen_ai.prompt.version"]),
        "template_variables_json": canonical_json(variables) if variables else None,
    }


def content_columns(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The content attributes (JSON text on spans, structured on the details event) -> call columns."""
    cols: dict[str, Any] = {}
    if attrs.get("gen_ai.system_instructions") is not None:
        cols["system_text"] = gc.system_text_of(attrs["gen_ai.system_instructions"])
    if attrs.get("gen_ai.input.messages") is not None:
        messages = gc.semconv_messages(attrs["gen_ai.input.messages"]) or []
        # a system message inside the input (older emitters) is the system prompt
        system = [m for m in messages if m.get("role") == "system"]
        if system and "system_text" not in cols:
            cols["system_text"] = gc.output_text(system)
        cols["messages"] = [m for m in messages if m.get("role") != "system"]
    if attrs.get("gen_ai.output.messages") is not None:
        cols["output_messages"] = gc.semconv_messages(attrs["gen_ai.output.messages"])
        cols["output_text"] = gc.output_text(cols["output_messages"])
    if attrs.get("gen_ai.tool.definitions") is not None:
        cols["tool_definitions"] = gc.tool_definitions(attrs["gen_ai.tool.definitions"])
    return cols


def finish_reasons(attrs: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(normalized finish reason, native stop reason)."""
    native = attrs.get("anthropic.message.stop_reason")
    reasons = attrs.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, str):
        reasons = [reasons]
    reasons = list(reasons or []) or gc.semconv_output_finish_reasons(attrs.get("gen_ai.output.messages"))
    normalized = normalize_finish_reason(reasons[0]) if reasons else normalize_finish_reason(native)
    return normalized, native


def span_event_content(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """<= 1.27: ``gen_ai.content.prompt`` / ``gen_ai.content.completion`` span events."""
    cols: dict[str, Any] = {}
    for event in events:
        attrs = event.get("attributes") or {}
        if event.get("name") == "gen_ai.content.prompt" and attrs.get("gen_ai.prompt") is not None:
            messages = _role_content_list(attrs["gen_ai.prompt"])
            system = [m for m in messages if m.get("role") == "system"]
            if system:
                cols["system_text"] = gc.output_text(system)
            cols["messages"] = [m for m in messages if m.get("role") != "system"]
        elif event.get("name") == "gen_ai.content.completion" and attrs.get("gen_ai.completion") is not None:
            cols["output_messages"] = _role_content_list(attrs["gen_ai.completion"])
            cols["output_text"] = gc.output_text(cols["output_messages"])
    return cols


def _role_content_list(value: Any) -> list[dict[str, Any]]:
    value = gc.parse_json(value)
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list):
        return [{"role": None, "name": None, "parts": gc.content_parts(value)}]
    return [
        gc.role_content_message(m) if isinstance(m, Mapping) else gc.role_content_message({"content": m}) for m in value
    ]


def content_from_log_events(logs: list[OtlpLog]) -> dict[str, Any]:
    """The log events of one span -> call columns.

    1.28-1.36: one record per message (system/user/assistant/tool, then
    ``gen_ai.choice`` per output choice), ordered by time. >= 1.37: the
    ``operation.details`` event carries the span's attributes, content structured.
    """
    cols: dict[str, Any] = {}
    ordered = sorted(logs, key=lambda r: (r.time is None, r.time, r.line, r.index))
    details = [r for r in ordered if r.event_name == DETAILS_EVENT]
    for record in details:
        cols.update({k: v for k, v in content_columns(record.attributes).items() if v is not None})
        reason, native = finish_reasons(record.attributes)
        if reason:
            cols["finish_reason"] = reason
    system_texts, messages, outputs, tools, reasons = [], [], [], [], []
    for record in ordered:
        body = record.body if isinstance(record.body, Mapping) else {"content": record.body}
        if record.event_name in MESSAGE_EVENTS:
            role = body.get("role") or MESSAGE_EVENTS[record.event_name]
            content = body.get("content")
            if isinstance(content, Mapping) and set(content) == {"tools"}:
                tools += gc.tool_definitions(content["tools"]) or []  # OpenLLMetry sends tools as a user event
                continue
            if role == "system":
                system_texts.append(gc.output_text([gc.role_content_message(body, "system")]) or "")
                continue
            messages.append(gc.role_content_message(body, role))
        elif record.event_name == CHOICE_EVENT:
            message = dict(body.get("message") or {})
            message.setdefault("role", "assistant")
            if body.get("tool_calls"):
                message["tool_calls"] = body["tool_calls"]
            row = gc.role_content_message(message)
            index = body.get("index", 0)
            outputs.append((index, row))
            if body.get("finish_reason"):
                reasons.append(body["finish_reason"])
    if system_texts and "system_text" not in cols:
        cols["system_text"] = "\n".join(system_texts)
    if messages and "messages" not in cols:
        cols["messages"] = messages
    if tools and "tool_definitions" not in cols:
        cols["tool_definitions"] = tools
    if outputs and "output_messages" not in cols:
        # choices of one response may arrive one content block each (OpenLLMetry): one message
        parts = [p for _, row in sorted(outputs, key=lambda o: o[0]) for p in row["parts"]]
        cols["output_messages"] = [{"role": "assistant", "name": None, "parts": parts}]
        cols["output_text"] = gc.output_text(cols["output_messages"])
    if reasons and "finish_reason" not in cols:
        cols["finish_reason"] = normalize_finish_reason(reasons[-1])
    return cols


def evaluation_feedback(attrs: Mapping[str, Any], at: Any, source: str, key: str) -> dict[str, Any]:
    """A ``gen_ai.evaluation.result`` event (log or span event) -> FEEDBACK."""
    value = attrs.get("gen_ai.evaluation.score.value")
    return {
        "source": source,
        "name": attrs.get("gen_ai.evaluation.name"),
        "value_number": None if value is None else float(value),
        "value_string": attrs.get("gen_ai.evaluation.score.label"),
        "comment": attrs.get("gen_ai.evaluation.explanation"),
        "created_at": at,
        "id": sha256_hex(key)[:32],
        "target_level": "call",
    }


def is_legacy_indexed(attrs: Mapping[str, Any]) -> bool:
    return any(LEGACY_INDEXED.match(k) for k in attrs)
