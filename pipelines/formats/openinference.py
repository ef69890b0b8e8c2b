"""OpenInference (Arize Phoenix) span attributes -> call columns.

The anthropic instrumentor records the request kwargs in ``input.value`` and
the raw response in ``output.value``: when both are there the call is built
from them (the most lossless source, ``extra_body`` included). Otherwise the
flattened ``llm.input_messages.N.message.*`` / ``llm.output_messages`` /
``llm.tools`` / ``llm.invocation_parameters`` attributes are used. TOOL and
RETRIEVER spans become tool executions and retrievals; ``annotations.N.*``
(and ``evaluations.N.*``) become feedback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipelines.formats import genai_content as gc
from pipelines.record.anthropic_shape import normalize_finish_reason, request_columns, response_columns
from pipelines.record.canonical import canonical_json, sha256_hex
from pipelines.record.rows import document_row

FORMAT = "openinference"
SPAN_KIND = "openinference.span.kind"
REDACTED = "__REDACTED__"
# SDK call options that are not part of the request body
CLIENT_OPTIONS = ("extra_headers", "extra_query", "extra_body", "timeout")
MAPPED_PREFIXES = (
    "llm.",
    "input.",
    "output.",
    "retrieval.documents.",
    "tool.",
    "annotations.",
    "evaluations.",
    "session.id",
    "user.id",
    "tag.tags",
    "prompt.",
    SPAN_KIND,
)


def span_kind(attrs: Mapping[str, Any]) -> str | None:
    kind = attrs.get(SPAN_KIND)
    return str(kind).upper() if kind else None


def is_openinference(attrs: Mapping[str, Any]) -> bool:
    return SPAN_KIND in attrs


def _json_value(attrs: Mapping[str, Any], key: str) -> Any:
    value = attrs.get(key)
    if value is None or value == REDACTED:
        return None
    if attrs.get(key.replace(".value", ".mime_type")) == "application/json" or (
        isinstance(value, str) and value[:1] in "[{"
    ):
        return gc.parse_json(value)
    return value


def request_as_sent(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """SDK kwargs -> the request body the SDK sent: client options dropped, ``extra_body`` merged in."""
    body = {k: v for k, v in kwargs.items() if k not in CLIENT_OPTIONS}
    extra = kwargs.get("extra_body")
    if isinstance(extra, Mapping):
        body.update(extra)
    return body


def _flat_message(item: Mapping[str, Any]) -> dict[str, Any]:
    message = item.get("message") if isinstance(item.get("message"), Mapping) else item
    role = message.get("role")
    tool_calls = [(c.get("tool_call") or c) for c in message.get("tool_calls") or [] if isinstance(c, Mapping)]
    blocks = []
    for content in message.get("contents") or []:
        if not isinstance(content, Mapping):
            continue
        body = content.get("message_content") or {}
        if body.get("type") == "tool_use" and tool_calls:
            continue  # the same call is in tool_calls
        if body.get("type") == "text":
            blocks.append({"type": "text", "text": body.get("text")})
        elif body.get("type") == "image":
            blocks.append(
                {
                    "type": "image",
                    "source": {"type": "url", "url": ((body.get("image") or {}).get("image") or {}).get("url")},
                }
            )
        else:
            blocks.append({k: v for k, v in body.items()})
    content = blocks if blocks else message.get("content")
    return gc.role_content_message(
        {
            "role": role,
            "name": message.get("name"),
            "content": content,
            "tool_calls": tool_calls,
            "tool_call_id": message.get("tool_call_id"),
        }
    )


def flat_content_columns(attrs: Mapping[str, Any]) -> dict[str, Any]:
    cols: dict[str, Any] = {}
    inputs = [m for m in gc.unflatten(attrs, "llm.input_messages") or [] if isinstance(m, Mapping)]
    if inputs:
        messages = [_flat_message(m) for m in inputs]
        system = [m for m in messages if m["role"] == "system"]
        if system:
            cols["system_text"] = gc.output_text(system)
        cols["messages"] = [m for m in messages if m["role"] != "system"]
    outputs = [m for m in gc.unflatten(attrs, "llm.output_messages") or [] if isinstance(m, Mapping)]
    if outputs:
        cols["output_messages"] = [_flat_message(m) for m in outputs]
        cols["output_text"] = gc.output_text(cols["output_messages"])
    tools = [t for t in gc.unflatten(attrs, "llm.tools") or [] if isinstance(t, Mapping)]
    if tools:
        cols["tool_definitions"] = [gc.tool_definition((t.get("tool") or {}).get("json_schema")) for t in tools]
    invocation = gc.parse_json(attrs.get("llm.invocation_parameters"))
    if isinstance(invocation, Mapping):
        invocation = dict(invocation)
        invocation.pop("extra_body", None)  # already merged in by the instrumentor
        cols["params"] = {
            k: invocation.get(k) for k in ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop_sequences")
        }
        rest = {k: v for k, v in invocation.items() if k not in cols["params"]}
        cols["params_extra_json"] = canonical_json(rest) if rest else None
    return cols


def usage(attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    prompt = attrs.get("llm.token_count.prompt")
    completion = attrs.get("llm.token_count.completion")
    cache_read = attrs.get("llm.token_count.prompt_details.cache_read")
    cache_write = attrs.get("llm.token_count.prompt_details.cache_write")
    total = attrs.get("llm.token_count.total")
    cost = attrs.get("llm.cost.total")
    if all(v is None for v in (prompt, completion, cache_read, cache_write, total, cost)):
        return None
    # OpenInference's prompt count includes cached tokens; the table keeps uncached input
    uncached = None if prompt is None else int(prompt) - int(cache_read or 0) - int(cache_write or 0)
    return {
        "input_tokens": uncached,
        "output_tokens": None if completion is None else int(completion),
        "cache_read_input_tokens": None if cache_read is None else int(cache_read),
        "cache_write_input_tokens": None if cache_write is None else int(cache_write),
        "total_tokens": None if total is None else int(total),
        "cost_usd": None if cost is None else float(cost),
    }


def call_columns(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """An LLM span's attributes -> call columns (not finalized)."""
    cols: dict[str, Any] = {
        "provider": (attrs.get("llm.provider") or attrs.get("llm.system") or None),
        "request_model": attrs.get("llm.request.model_name"),
        "response_model": attrs.get("llm.response.model_name") or attrs.get("llm.model_name"),
        "session_id": attrs.get("session.id"),
        "user_id": attrs.get("user.id"),
        "tags": list(attrs["tag.tags"]) if isinstance(attrs.get("tag.tags"), list | tuple) else None,
        "template_id": attrs.get("prompt.id"),
        "template_version": attrs.get("llm.prompt_template.version"),
        "template_variables_json": gc.json_or_none(gc.parse_json(attrs.get("llm.prompt_template.variables"))),
    }
    native = attrs.get("llm.finish_reason")
    cols.update(stop_reason_native=native, finish_reason=normalize_finish_reason(native))
    cols.update(flat_content_columns(attrs))
    kwargs = _json_value(attrs, "input.value")
    if isinstance(kwargs, Mapping) and isinstance(kwargs.get("messages"), list):
        request = request_as_sent(kwargs)
        cols.update(request_columns(request))
    response = _json_value(attrs, "output.value")
    if isinstance(response, Mapping) and response.get("type") == "message":
        cols.update({k: v for k, v in response_columns(response).items() if v is not None})
    reported = usage(attrs)
    if reported is not None:
        if cols.get("usage") and reported.get("cost_usd") is not None:
            cols["usage"]["cost_usd"] = reported["cost_usd"]
        cols["usage"] = cols.get("usage") or reported
    cols["content_captured"] = bool(cols.get("messages")) or None
    return cols


def tool_execution(attrs: Mapping[str, Any], span_id: str, start: Any, end: Any, failed: bool) -> dict[str, Any]:
    arguments = _json_value(attrs, "input.value")
    result = _json_value(attrs, "output.value")
    return {
        "span_id": span_id,
        "tool_call_id": attrs.get("tool.id") or attrs.get("tool_call.id"),
        "name": attrs.get("tool.name"),
        "arguments_json": gc.json_or_none(arguments),
        "result_json": gc.json_or_none(result),
        "is_error": failed,
        "started_at": start,
        "ended_at": end,
    }


def retrieval(attrs: Mapping[str, Any]) -> dict[str, Any]:
    docs = []
    for rank, item in enumerate(gc.unflatten(attrs, "retrieval.documents") or [], start=1):
        doc = (item or {}).get("document") or {} if isinstance(item, Mapping) else {}
        score = None if doc.get("score") is None else float(doc["score"])
        docs.append(document_row(doc.get("id"), rank, score, doc.get("content")))
    first_meta = next(
        (
            gc.parse_json(d.get("document", {}).get("metadata"))
            for d in gc.unflatten(attrs, "retrieval.documents") or []
            if isinstance(d, Mapping)
        ),
        None,
    )
    index = first_meta.get("index") if isinstance(first_meta, Mapping) else None
    query = attrs.get("input.value")
    return {
        "embedding_model": attrs.get("embedding.model_name"),
        "index_snapshot": index,
        "query_text": None if query == REDACTED else query,
        "documents": docs,
    }


def annotations(attrs: Mapping[str, Any], at: Any, key: str) -> list[dict[str, Any]]:
    """``annotations.N.annotation.*`` / ``evaluations.N.evaluation.*`` -> FEEDBACK rows."""
    out = []
    for prefix, inner in (("annotations", "annotation"), ("evaluations", "evaluation")):
        for i, item in enumerate(gc.unflatten(attrs, prefix) or []):
            a = (item or {}).get(inner) or {} if isinstance(item, Mapping) else {}
            score = a.get("score")
            out.append(
                {
                    "source": f"openinference:{a.get('annotator_kind') or 'unknown'}".lower(),
                    "name": a.get("name"),
                    "value_number": None if score is None else float(score),
                    "value_string": a.get("label"),
                    "comment": a.get("explanation"),
                    "created_at": at,
                    "id": a.get("identifier") or sha256_hex(f"{key}|{prefix}|{i}")[:32],
                    "target_level": "call",
                }
            )
    return out


def is_mapped(key: str) -> bool:
    return key.startswith(MAPPED_PREFIXES)
