"""Message content in the shapes tracing libraries record it -> MESSAGE / PART rows.

Shapes handled:

- OpenTelemetry GenAI >= 1.37 parts (``gen_ai.input.messages`` and friends):
  ``{role, parts:[{type:text|reasoning|tool_call|tool_call_response|...}]}``;
- role/content messages (1.28-1.36 log events, <= 1.27 span events, OpenLLMetry
  and LangSmith), whose ``content`` is a string, Anthropic-style blocks, or a dict;
- flattened indexed attributes (``gen_ai.prompt.0.role``), via ``unflatten``.

Every part keeps its source JSON in ``native_json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pipelines.record.anthropic_shape import part_from_block
from pipelines.record.canonical import canonical_json


def parse_json(value: Any) -> Any:
    """A JSON-text attribute -> its value; anything else as is (structured event bodies)."""
    if isinstance(value, str | bytes):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def json_or_none(value: Any) -> str | None:
    return None if value is None else canonical_json(value)


def unflatten(attrs: Mapping[str, Any], prefix: str) -> Any:
    """``{"p.0.a": 1, "p.0.b.1.c": 2}`` with prefix ``p`` -> ``[{"a": 1, "b": [None, {"c": 2}]}]``.

    Numeric path segments become list positions; the rest become keys."""
    root: dict[str, Any] = {}
    start = prefix + "."
    for key, value in attrs.items():
        if not key.startswith(start):
            continue
        node = root
        segments = key[len(start) :].split(".")
        for seg in segments[:-1]:
            node = node.setdefault(seg, {})
            if not isinstance(node, dict):
                break
        else:
            node[segments[-1]] = value
    return _lists(root)


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if node and all(k.isdigit() for k in node):
        size = max(int(k) for k in node) + 1
        return [_lists(node.get(str(i))) for i in range(size)]
    return {k: _lists(v) for k, v in node.items()}


# --- OpenTelemetry GenAI parts (>= 1.37) ---


def semconv_part(part: Any) -> dict[str, Any]:
    if not isinstance(part, Mapping):
        return part_from_block(str(part))
    kind = part.get("type")
    row: dict[str, Any] = {"type": kind, "native_json": canonical_json(part)}
    if kind == "text":
        row["text"] = part.get("content")
    elif kind == "reasoning":
        row.update(type="thinking", text=part.get("content"))
    elif kind in ("tool_call", "server_tool_call"):
        row.update(type="tool_call", tool_call_id=part.get("id"), tool_name=part.get("name"))
        arguments = parse_json(part.get("arguments"))
        row["arguments_json"] = json_or_none(arguments)
    elif kind in ("tool_call_response", "server_tool_call_response"):
        # the JSON schema says "response"; some spec examples say "result"
        response = part.get("response", part.get("result"))
        row.update(type="tool_result", tool_call_id=part.get("id"), content_json=json_or_none(response))
        row["text"] = _text_of(response)
        row["is_error"] = bool(part.get("is_error", False))
    return row


def semconv_messages(value: Any) -> list[dict[str, Any]] | None:
    """``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON text or structured) -> MESSAGE rows."""
    value = parse_json(value)
    if value is None:
        return None
    if not isinstance(value, list):
        return [{"role": None, "name": None, "parts": [part_from_block(str(value))]}]
    out = []
    for message in value:
        if not isinstance(message, Mapping):
            out.append({"role": None, "name": None, "parts": [part_from_block(str(message))]})
            continue
        if "parts" not in message and "content" in message:
            out.append(role_content_message(message))
            continue
        parts = [semconv_part(p) for p in message.get("parts") or []]
        out.append({"role": message.get("role"), "name": message.get("name"), "parts": parts})
    return out


def semconv_output_finish_reasons(value: Any) -> list[str]:
    value = parse_json(value)
    if not isinstance(value, list):
        return []
    return [m["finish_reason"] for m in value if isinstance(m, Mapping) and m.get("finish_reason")]


def system_text_of(value: Any) -> str | None:
    """``gen_ai.system_instructions`` (a list of parts, JSON text or structured) -> the system text."""
    value = parse_json(value)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        value = [value]
    texts = []
    for part in value:
        if isinstance(part, Mapping):
            text = part.get("content") if part.get("type") in (None, "text") else None
            text = text if text is not None else part.get("text")
            if text is not None:
                texts.append(_text_of(text) or "")
        elif isinstance(part, str):
            texts.append(part)
    return "\n".join(texts) if texts else None


def tool_definition(tool: Any) -> dict[str, Any]:
    """A tool definition in the semconv shape (``parameters``), Anthropic's (``input_schema``),
    OpenAI's (``function``) or OpenInference's (``json_schema``) -> TOOL_DEFINITION."""
    tool = parse_json(tool)
    if not isinstance(tool, Mapping):
        return {"name": None, "description": None, "schema_json": None, "native_json": json_or_none(tool)}
    inner = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
    schema = inner.get("parameters", inner.get("input_schema"))
    return {
        "name": inner.get("name"),
        "description": inner.get("description"),
        "schema_json": json_or_none(parse_json(schema)),
        "native_json": canonical_json(tool),
    }


def tool_definitions(value: Any) -> list[dict[str, Any]] | None:
    value = parse_json(value)
    if value is None:
        return None
    if isinstance(value, Mapping):
        value = [{"name": k, **(parse_json(v) or {})} for k, v in value.items()]  # Langfuse: {name: json}
    return [tool_definition(t) for t in value]


# --- role/content messages (events, legacy attributes, LangSmith) ---


def _text_of(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = [
            b.get("text", b.get("content"))
            for b in value
            if isinstance(b, Mapping)
            and b.get("type") in ("text", None)
            and isinstance(b.get("text", b.get("content")), str)
        ]
        return "\n".join(texts) if texts else None
    return None


def content_parts(content: Any) -> list[dict[str, Any]]:
    """A message ``content``: a string (JSON text of blocks is unpacked), a block list, or a dict."""
    if content is None:
        return []
    if isinstance(content, str):
        parsed = parse_json(content) if content[:1] in "[{" else content
        if isinstance(parsed, list) and all(isinstance(b, Mapping) and "type" in b for b in parsed):
            content = parsed
        else:
            return [part_from_block(content)]
    if isinstance(content, Mapping):
        content = [content]
    parts = []
    for block in content:
        if isinstance(block, Mapping) and block.get("type") in ("tool_call", "tool_call_response", "reasoning"):
            parts.append(semconv_part(block))
        elif isinstance(block, Mapping) and "type" in block:
            parts.append(part_from_block(dict(block)))
        elif isinstance(block, str):
            parts.append(part_from_block(block))
        else:
            parts.append({"type": "other", "native_json": json_or_none(block)})
    return parts


def openai_tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    """``{id, type:"function", function:{name, arguments}}`` (or flat ``{id, name, arguments}``) -> a tool_call PART."""
    function = call.get("function") if isinstance(call.get("function"), Mapping) else call
    arguments = parse_json(function.get("arguments"))
    return {
        "type": "tool_call",
        "tool_call_id": call.get("id"),
        "tool_name": function.get("name"),
        "arguments_json": json_or_none(arguments),
        "native_json": canonical_json(call),
    }


def role_content_message(message: Mapping[str, Any], role: str | None = None) -> dict[str, Any]:
    """``{role, content, tool_calls?, tool_call_id?|id?}`` -> MESSAGE. A ``tool`` message
    becomes a tool_result part, so tool results read the same from every source."""
    role = role or message.get("role")
    content = message.get("content")
    tool_call_id = message.get("tool_call_id") or (message.get("id") if role == "tool" else None)
    if role == "tool" and (tool_call_id or not isinstance(content, list)):
        part = {
            "type": "tool_result",
            "tool_call_id": tool_call_id,
            "text": _text_of(content),
            "content_json": json_or_none(content),
            "is_error": bool(message.get("is_error", False)),
            "native_json": canonical_json(message),
        }
        return {"role": "tool", "name": message.get("name"), "parts": [part]}
    parts = content_parts(content)
    parts += [openai_tool_call(c) for c in message.get("tool_calls") or [] if isinstance(c, Mapping)]
    return {"role": role, "name": message.get("name"), "parts": parts}


def output_text(messages: list[dict[str, Any]] | None) -> str | None:
    texts = [
        p["text"] for m in messages or [] for p in m.get("parts") or [] if p.get("type") == "text" and p.get("text")
    ]
    return "\n".join(texts) if texts else None


# --- back to an Anthropic request, for replay and hashing ---

# An Anthropic block of each type has this key (semconv parts of the same type do not)
ANTHROPIC_BLOCK_KEYS = {
    "text": "text",
    "tool_use": "input",
    "tool_result": "tool_use_id",
    "thinking": "thinking",
    "image": "source",
}


def _anthropic_block(part: Mapping[str, Any]) -> dict[str, Any]:
    native = parse_json(part.get("native_json"))
    if isinstance(native, Mapping) and ANTHROPIC_BLOCK_KEYS.get(native.get("type"), "-") in native:
        return dict(native)  # already an Anthropic block
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part.get("text") or ""}
    if kind == "tool_call":
        return {
            "type": "tool_use",
            "id": part.get("tool_call_id"),
            "name": part.get("tool_name"),
            "input": parse_json(part.get("arguments_json")) or {},
        }
    if kind == "tool_result":
        content = parse_json(part.get("content_json"))
        block = {"type": "tool_result", "tool_use_id": part.get("tool_call_id"), "content": content}
        if part.get("is_error"):
            block["is_error"] = True
        return block
    if kind == "thinking":
        return {"type": "thinking", "thinking": part.get("text") or ""}
    return native if isinstance(native, Mapping) else {"type": kind or "other"}


def anthropic_request(
    model: str | None,
    system: str | None,
    messages: list[dict[str, Any]] | None,
    tools: list[dict[str, Any]] | None,
    params: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """An Anthropic Messages request rebuilt from recorded content, for replay. It is
    not the bytes that were sent (a trace does not keep those): calls carrying one
    are flagged ``request_reconstructed``, and their ``request_sha256`` is not a
    witness of the original request."""
    if not messages:
        return None
    out_messages = []
    for m in messages:
        role = "user" if m.get("role") in ("user", "tool") else m.get("role")
        if role == "system":
            continue
        blocks = [_anthropic_block(p) for p in m.get("parts") or []]
        if out_messages and out_messages[-1]["role"] == role:
            out_messages[-1]["content"] += blocks  # consecutive tool results fold into one user turn
        else:
            out_messages.append({"role": role, "content": blocks})
    request: dict[str, Any] = {"model": model, "system": system, "messages": out_messages}
    if tools:
        request["tools"] = [
            {
                "name": t.get("name"),
                "description": t.get("description"),
                "input_schema": parse_json(t.get("schema_json")),
            }
            for t in tools
        ]
    for key, value in (params or {}).items():
        if value is not None:
            request[key] = value
    return request
