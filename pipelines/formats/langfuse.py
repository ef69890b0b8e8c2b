"""Langfuse observations and scores -> calls, spans and feedback (shared by the
blob export and the public API formats).

Rows are read in the blob export's snake_case (the API's camelCase is renamed
first, see langfuse_api.py). A GENERATION observation is a call; every
observation is a span; TOOL and RETRIEVER observations are placed on the call
they fed; a score is feedback on its observation's call (or, without one, on
the trace's last call) and a `spans` row of kind ``feedback``.

Timestamps without a zone are UTC. Latency: the export's ``latency`` is in
seconds for integrations created on or after 2026-04-01 and milliseconds
before, and a row does not say which; so latency comes from start and end
time when both are there, and otherwise rows created before the change are
read as milliseconds and later rows as seconds (flag ``latency_unit_assumed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pipelines.formats import genai_content as gc
from pipelines.formats.base import Fragment, known_kind, parse_time
from pipelines.record.anthropic_shape import message_row, normalize_finish_reason, request_columns
from pipelines.record.canonical import canonical_json
from pipelines.record.rows import (
    RecordError,
    document_row,
    finalize_call,
    finalize_span,
    new_call,
    new_span,
    span_for_call,
)

LATENCY_IN_SECONDS_FROM = datetime(2026, 4, 1, tzinfo=UTC)
SPAN_KINDS = {"GENERATION": "llm_call", "TOOL": "tool", "RETRIEVER": "retrieval", "EVALUATOR": "check"}
NUMERIC_PARAMS = {"max_tokens": int, "top_k": int, "seed": int, "temperature": float, "top_p": float}
OBSERVATION_COLUMNS = {
    "id", "trace_id", "type", "parent_observation_id", "start_time", "end_time", "name", "metadata", "level",
    "status_message", "input", "output", "provided_model_name", "model", "model_parameters", "usage_details",
    "cost_details", "completion_start_time", "prompt_name", "prompt_version", "total_cost", "latency",
    "user_id", "session_id", "trace_name", "tags", "release", "environment", "tool_definitions",
}  # fmt: skip


def _params(raw: Any) -> dict[str, Any]:
    """``model_parameters`` (JSON text; values often strings) -> typed request params."""
    params = gc.parse_json(raw) or {}
    if not isinstance(params, Mapping):
        return {}
    out = {}
    for key, value in params.items():
        cast = NUMERIC_PARAMS.get(key)
        if cast is not None and isinstance(value, str):
            try:
                value = cast(float(value)) if cast is int else cast(value)
            except ValueError:
                pass
        elif key == "stop_sequences" and isinstance(value, str):
            value = gc.parse_json(value)
        out[key] = value
    return out


def _usage(details: Any, total_cost: Any) -> dict[str, Any] | None:
    details = details if isinstance(details, Mapping) else gc.parse_json(details) or {}
    if not details and total_cost is None:
        return None

    def first(*keys: str) -> int | None:
        return next((int(details[k]) for k in keys if details.get(k) is not None), None)

    return {
        "input_tokens": first("input"),
        "output_tokens": first("output"),
        "cache_read_input_tokens": first("cache_read_input_tokens", "input_cache_read", "cache_read"),
        "cache_write_input_tokens": first("cache_creation_input_tokens", "input_cache_creation", "cache_write"),
        "total_tokens": first("total"),
        "cost_usd": None if total_cost is None else float(total_cost),
    }


def _input_columns(value: Any, model: str | None, params: dict[str, Any]) -> dict[str, Any]:
    value = gc.parse_json(value)
    if isinstance(value, Mapping) and isinstance(value.get("messages"), list):
        # the integration logged the SDK kwargs: a request, rebuilt from what was logged
        request = {"model": model, **params, **value}
        messages = request.get("messages") or []
        system = [m for m in messages if isinstance(m, Mapping) and m.get("role") == "system"]
        if system and "system" not in request:
            request["system"] = gc.output_text([gc.role_content_message(m) for m in system])
            request["messages"] = [m for m in messages if m not in system]
        return {**request_columns(request), "flags": ["request_reconstructed"]}
    if isinstance(value, list):
        messages = [gc.role_content_message(m) for m in value if isinstance(m, Mapping)]
        system = [m for m in messages if m["role"] == "system"]
        return {
            "system_text": gc.output_text(system),
            "messages": [m for m in messages if m["role"] != "system"],
        }
    if value is None:
        return {}
    return {"messages": [{"role": "user", "name": None, "parts": gc.content_parts(value)}]}


def _output_columns(value: Any) -> dict[str, Any]:
    value = gc.parse_json(value)
    if value is None:
        return {}
    if isinstance(value, Mapping) and isinstance(value.get("content"), list):
        row = message_row({"role": value.get("role", "assistant"), "content": value["content"]})
        cols = {"output_messages": [row], "output_text": gc.output_text([row])}
        if value.get("id"):
            cols["response_id"] = value["id"]
        if value.get("model"):
            cols["response_model"] = value["model"]
        if value.get("stop_reason"):
            cols["stop_reason_native"] = value["stop_reason"]
        return cols
    if isinstance(value, Mapping):
        row = gc.role_content_message({"role": value.get("role", "assistant"), **value})
    else:
        row = {"role": "assistant", "name": None, "parts": gc.content_parts(value)}
    return {"output_messages": [row], "output_text": gc.output_text([row])}


def _latency_ms(obs: Mapping[str, Any], start: datetime, end: datetime | None) -> tuple[float | None, bool]:
    if end is not None:
        return (end - start).total_seconds() * 1000.0, False
    latency = obs.get("latency")
    if latency is None:
        return None, False
    created = parse_time(obs.get("created_at"), "created_at") or start
    seconds = created >= LATENCY_IN_SECONDS_FROM
    return float(latency) * (1000.0 if seconds else 1.0), True


def observation_rows(
    obs: Mapping[str, Any], source_format: str, source: Any, line: int
) -> tuple[dict[str, Any] | None, dict[str, Any], Fragment | None]:
    """One observation -> (call or None, its `spans` row, a tool/retrieval fragment or None)."""
    if not obs.get("id") or not obs.get("trace_id"):
        raise RecordError("missing_field", "observation has no id or trace_id")
    start = parse_time(obs.get("start_time"), "start_time")
    if start is None:
        raise RecordError("missing_field", "observation has no start_time")
    end = parse_time(obs.get("end_time"), "end_time")
    kind = str(obs.get("type") or "SPAN").upper()
    parent = obs.get("parent_observation_id") or None  # "" is the root
    failed = str(obs.get("level") or "").upper() == "ERROR"
    metadata = gc.parse_json(obs.get("metadata"))
    common = {
        "trace_id": str(obs["trace_id"]),
        "span_id": str(obs["id"]),
        "parent_span_id": parent,
        "session_id": obs.get("session_id"),
        "user_id": obs.get("user_id"),
        "source_format": source_format,
        "source_uri": source.uri,
        "source_etag": source.etag,
        "source_line": line,
        "occurred_at": start,
        "ended_at": end,
    }
    call = None
    if kind == "GENERATION":
        model = obs.get("provided_model_name") or obs.get("model")
        params = _params(obs.get("model_parameters"))
        latency, assumed = _latency_ms(obs, start, end)
        call = new_call(
            **common,
            first_token_at=parse_time(obs.get("completion_start_time"), "completion_start_time"),
            latency_ms=latency,
            service=obs.get("trace_name"),
            environment=obs.get("environment"),
            release=obs.get("release") or None,
            tags=list(obs["tags"]) if obs.get("tags") else None,
            template_id=obs.get("prompt_name"),
            template_version=None if obs.get("prompt_version") is None else str(obs["prompt_version"]),
            provider="anthropic" if str(model or "").startswith("claude") else None,
            request_model=model,
            params={
                k: params.get(k) for k in ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop_sequences")
            },
            usage=_usage(obs.get("usage_details"), obs.get("total_cost")),
            status="error" if failed else "ok",
            error_message=(obs.get("status_message") or None) if failed else None,
            flags=["latency_unit_assumed"] if assumed else None,
        )
        inputs = _input_columns(obs.get("input"), model, params)
        flags = [*(call["flags"] or []), *inputs.pop("flags", [])]
        call.update({k: v for k, v in inputs.items() if v is not None})
        call["request_model"] = model or call.get("request_model")
        call.update(_output_columns(obs.get("output")))
        if call.get("tool_definitions") in (None, []) and obs.get("tool_definitions"):
            call["tool_definitions"] = gc.tool_definitions(obs["tool_definitions"])
        meta_reason = metadata.get("stop_reason") if isinstance(metadata, Mapping) else None
        native = call.get("stop_reason_native") or meta_reason
        call.update(stop_reason_native=native, finish_reason=normalize_finish_reason(native), flags=flags or None)
        extra = {k: v for k, v in obs.items() if k not in OBSERVATION_COLUMNS and v not in (None, "", [], {})}
        extra.update(metadata=metadata, latency=obs.get("latency"), prompt_id=obs.get("prompt_id"))
        call["extra_json"] = canonical_json({k: v for k, v in extra.items() if v is not None})
        call = finalize_call(call)
        span = span_for_call(call, attributes_json=canonical_json({"name": obs.get("name"), "type": kind}))
        return call, span, None
    span = finalize_span(
        new_span(
            **common,
            kind=known_kind(SPAN_KINDS.get(kind, kind)),
            name=obs.get("name"),
            status="error" if failed else "ok",
            tool_name=obs.get("name") if kind == "TOOL" else None,
            attributes_json=canonical_json({k: v for k, v in obs.items() if v not in (None, "", [], {})}),
        )
    )
    fragment = None
    if kind == "TOOL":
        payload = {
            "span_id": str(obs["id"]),
            "tool_call_id": (metadata or {}).get("tool_call_id") if isinstance(metadata, Mapping) else None,
            "name": obs.get("name"),
            "arguments_json": gc.json_or_none(gc.parse_json(obs.get("input"))),
            "result_json": gc.json_or_none(gc.parse_json(obs.get("output"))),
            "is_error": failed,
            "started_at": start,
            "ended_at": end,
        }
        fragment = Fragment("tool_execution", common["trace_id"], None, payload, parent, end or start)
    elif kind == "RETRIEVER":
        fragment = Fragment("retrieval", common["trace_id"], None, _retrieval(obs), parent, start)
    return None, span, fragment


def _retrieval(obs: Mapping[str, Any]) -> dict[str, Any]:

    query = gc.parse_json(obs.get("input"))
    output = gc.parse_json(obs.get("output"))
    docs = output.get("documents") if isinstance(output, Mapping) else output
    rows = []
    for rank, doc in enumerate(docs if isinstance(docs, list) else [], start=1):
        doc = doc if isinstance(doc, Mapping) else {"content": doc}
        text = doc.get("content", doc.get("text", doc.get("page_content")))
        rows.append(document_row(doc.get("id"), rank, doc.get("score"), text))
    query_text = query.get("query") if isinstance(query, Mapping) else query
    return {"embedding_model": None, "index_snapshot": None, "query_text": query_text, "documents": rows}


def score_rows(score: Mapping[str, Any], source_format: str, source: Any, line: int) -> tuple[dict, Fragment]:
    """One score -> (its `spans` row, a feedback fragment for its call or trace)."""
    if not score.get("id"):
        raise RecordError("missing_field", "score has no id")
    if not score.get("trace_id"):
        raise RecordError("unsupported_target", "score has no trace_id (session or dataset-run scores are not joined)")
    at = parse_time(score.get("timestamp") or score.get("created_at"), "timestamp")
    if at is None:
        raise RecordError("missing_field", "score has no timestamp")
    observation = score.get("observation_id") or None
    value = score.get("value")
    item = {
        "source": f"langfuse:{str(score.get('source') or 'api').lower()}",
        "name": score.get("name"),
        "value_number": None if value is None or isinstance(value, str) else float(value),
        "value_string": score.get("string_value") or (value if isinstance(value, str) else None),
        "comment": score.get("comment"),
        "created_at": at,
        "id": str(score["id"]),
        "target_level": "call" if observation else "trace",
    }
    span = finalize_span(
        new_span(
            trace_id=str(score["trace_id"]),
            span_id=str(score["id"]),
            parent_span_id=observation,
            session_id=score.get("session_id"),
            source_format=source_format,
            source_uri=source.uri,
            source_etag=source.etag,
            source_line=line,
            kind="evaluation",
            name=score.get("name"),
            occurred_at=at,
            status="ok",
            attributes_json=canonical_json({k: v for k, v in score.items() if v is not None}),
        )
    )
    return span, Fragment("feedback", str(score["trace_id"]), observation, item, at=at)
