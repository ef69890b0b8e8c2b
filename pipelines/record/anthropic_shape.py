"""Anthropic Messages request/response bodies -> the structured columns of a call.

Several sources carry Anthropic-shaped bodies (frozen-call JSON, agent event
logs, raw API logs, the SDK's own spans), so the mapping lives here once. The
verbatim block always rides along in ``native_json``: the structured fields are
for querying, the native JSON is for replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipelines.record.canonical import canonical_request, verbatim_json

SAMPLING_KEYS = ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop_sequences")
# Request keys that have a column of their own; the rest go to params_extra_json.
STRUCTURED_KEYS = {"model", "system", "messages", "tools", "metadata", "stream", *SAMPLING_KEYS}

# Provider stop reasons -> the OpenTelemetry GenAI finish reasons.
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_call",
    "pause_turn": "pause",
    "refusal": "content_filter",
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_call",
    "tool_call": "tool_call",
    "content_filter": "content_filter",
    "error": "error",
}


def normalize_finish_reason(native: str | None) -> str | None:
    if native is None:
        return None
    return FINISH_REASONS.get(native, native)


def _json_or_none(value: Any) -> str | None:
    return None if value is None else verbatim_json(value)


def part_from_block(block: Any) -> dict[str, Any]:
    """One content block (or a bare string) -> a PART row."""
    if isinstance(block, str):
        return {"type": "text", "text": block, "native_json": verbatim_json(block)}
    kind = block.get("type")
    part: dict[str, Any] = {"type": kind, "native_json": verbatim_json(block)}
    if kind == "text":
        part["text"] = block.get("text")
    elif kind in ("tool_use", "server_tool_use"):
        part.update(type="tool_call", tool_call_id=block.get("id"), tool_name=block.get("name"))
        part["arguments_json"] = _json_or_none(block.get("input"))
    elif kind == "tool_result":
        content = block.get("content")
        part.update(tool_call_id=block.get("tool_use_id"), is_error=bool(block.get("is_error", False)))
        part["content_json"] = _json_or_none(content)
        part["text"] = content_text(content)
    elif kind == "thinking":
        part["text"] = block.get("thinking")
    return part


def content_text(content: Any) -> str | None:
    """The text of a content value: a string, or the text blocks of a list joined."""
    if content is None:
        return None
    if isinstance(content, str):
        return content
    texts = [b.get("text", "") for b in content if isinstance(b, Mapping) and b.get("type") == "text"]
    return "\n".join(texts) if texts else None


def message_row(message: Mapping[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    blocks = [content] if isinstance(content, str) else list(content or [])
    return {"role": message.get("role"), "name": message.get("name"), "parts": [part_from_block(b) for b in blocks]}


def tool_definition_row(tool: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": tool.get("name"),
        "description": tool.get("description"),
        "schema_json": _json_or_none(tool.get("input_schema")),
        "native_json": verbatim_json(tool),
    }


def system_text(system: Any) -> str | None:
    return content_text(system)


def request_columns(request: Mapping[str, Any]) -> dict[str, Any]:
    """The call columns an Anthropic Messages request body fills."""
    return request_columns_and_plain(request)[0]


def request_columns_and_plain(request: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """(``request_columns``, the request when ``finalize_call`` can hash its
    blocks from it without parsing ``request_json`` back: canonical.canonical_request)."""
    params = {k: request.get(k) for k in SAMPLING_KEYS}
    extra = {k: v for k, v in request.items() if k not in STRUCTURED_KEYS and v is not None}
    request_json, plain = canonical_request(request)
    columns = {
        "request_model": request.get("model"),
        "system_text": system_text(request.get("system")),
        "messages": [message_row(m) for m in request.get("messages") or []],
        "tool_definitions": [tool_definition_row(t) for t in request.get("tools") or []],
        "params": params,
        "params_extra_json": verbatim_json(extra) if extra else None,
        "request_json": request_json,
    }
    return columns, plain


def response_columns(response: Mapping[str, Any]) -> dict[str, Any]:
    """The call columns an Anthropic Messages response body fills."""
    content = response.get("content") or []
    output = {"role": response.get("role", "assistant"), "content": content}
    usage = response.get("usage") or {}
    return {
        "response_id": response.get("id"),
        "response_model": response.get("model"),
        "output_messages": [message_row(output)],
        "output_text": content_text(content),
        "stop_reason_native": response.get("stop_reason"),
        "finish_reason": normalize_finish_reason(response.get("stop_reason")),
        "usage": usage_row(usage) if usage else None,
    }


def usage_row(usage: Mapping[str, Any], cost_usd: float | None = None) -> dict[str, Any]:
    """Anthropic usage -> USAGE. ``input_tokens`` follows Anthropic (uncached
    input only); total = input + cache read + cache write + output."""
    inp = usage.get("input_tokens")
    out = usage.get("output_tokens")
    cache_read = usage.get("cache_read_input_tokens")
    cache_write = usage.get("cache_creation_input_tokens", usage.get("cache_write_input_tokens"))
    # only counts add up; a wrong type stays in its column, where the schema check names it
    parts = [v for v in (inp, out, cache_read, cache_write) if isinstance(v, int) and not isinstance(v, bool)]
    return {
        "input_tokens": inp,
        "output_tokens": out,
        "cache_read_input_tokens": cache_read,
        "cache_write_input_tokens": cache_write,
        "total_tokens": sum(parts) if parts else None,
        "cost_usd": cost_usd,
    }
