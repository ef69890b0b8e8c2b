"""OpenLLMetry (traceloop) legacy indexed attributes -> call columns.

Older ``opentelemetry-instrumentation-anthropic`` releases (and other
traceloop instrumentors) flatten content into indexed attributes:
``gen_ai.prompt.{i}.role|content``, ``gen_ai.completion.{i}.role|content|
finish_reason|tool_calls.{j}.{id,name,arguments}``, ``llm.request.functions.{i}.*``,
with ``gen_ai.usage.prompt_tokens|completion_tokens``, ``llm.usage.total_tokens``,
``traceloop.association.properties.*`` (user, session) and
``traceloop.prompt.{key,version,template,template_variables}``.
Current releases write the semconv attributes (see otel_genai.py); spans of
both kinds are read by the same OTLP format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipelines.formats import genai_content as gc
from pipelines.record.anthropic_shape import normalize_finish_reason

FORMAT = "openllmetry"
SCOPE_PREFIX = "opentelemetry.instrumentation."  # traceloop instrumentors; the official ones say .genai.
ASSOCIATION = "traceloop.association.properties."
PREFIXES = ("gen_ai.prompt.", "gen_ai.completion.", "llm.request.functions.", ASSOCIATION, "traceloop.prompt.")
MAPPED = {
    "llm.request.type",
    "gen_ai.usage.prompt_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.usage.total_tokens",
    "gen_ai.usage.total_tokens",
}


def is_mapped(key: str) -> bool:
    return key in MAPPED or key.startswith(PREFIXES)


def _message(item: Mapping[str, Any]) -> dict[str, Any]:
    message = {"role": item.get("role"), "content": item.get("content")}
    calls = item.get("tool_calls")
    if isinstance(calls, list):
        message["tool_calls"] = [c for c in calls if isinstance(c, Mapping)]
    if item.get("tool_call_id"):
        message["tool_call_id"] = item["tool_call_id"]
    return gc.role_content_message(message)


def content_columns(attrs: Mapping[str, Any]) -> dict[str, Any]:
    cols: dict[str, Any] = {}
    prompts = [p for p in gc.unflatten(attrs, "gen_ai.prompt") or [] if isinstance(p, Mapping)]
    if prompts:
        system = [p for p in prompts if p.get("role") == "system"]
        if system:
            cols["system_text"] = "\n".join(gc.output_text([_message(p)]) or "" for p in system)
        cols["messages"] = [_message(p) for p in prompts if p.get("role") != "system"]
    completions = [c for c in gc.unflatten(attrs, "gen_ai.completion") or [] if isinstance(c, Mapping)]
    if completions:
        cols["output_messages"] = [_message(c) for c in completions]
        cols["output_text"] = gc.output_text(cols["output_messages"])
        native = next((c.get("finish_reason") for c in completions if c.get("finish_reason")), None)
        cols["stop_reason_native"] = native
        cols["finish_reason"] = normalize_finish_reason(native)
    functions = [f for f in gc.unflatten(attrs, "llm.request.functions") or [] if isinstance(f, Mapping)]
    if functions:
        cols["tool_definitions"] = [gc.tool_definition(dict(f)) for f in functions]
    return cols


def context_columns(attrs: Mapping[str, Any]) -> dict[str, Any]:
    props = {k[len(ASSOCIATION) :]: v for k, v in attrs.items() if k.startswith(ASSOCIATION)}
    prompt = gc.unflatten(attrs, "traceloop.prompt") or {}
    variables = gc.parse_json(prompt.get("template_variables")) if isinstance(prompt, Mapping) else None
    cols = {
        "user_id": props.get("user_id"),
        "session_id": props.get("session_id") or props.get("thread_id"),
    }
    if isinstance(prompt, Mapping) and prompt:
        cols.update(
            template_id=prompt.get("key"),
            template_version=None if prompt.get("version") is None else str(prompt["version"]),
            template_variables_json=gc.json_or_none(variables),
        )
    return {k: v for k, v in cols.items() if v is not None}
