"""LangSmith runs and feedback: the bulk export's Parquet and run JSON.

Bulk export: Parquet under ``export_id=/tenant_id=/session_id=/runs/year=/month=/day=``,
one run per row, complex columns as JSON text, times without a zone (UTC).
Run JSON (the API's or the SDK's ``Run``, one per document or line) has the
same fields as objects. A feedback object (``{run_id, trace_id, key, score,
...}``) in any object, or the ``feedbacks`` column of a run, becomes feedback
on that run's call, whenever it arrives.

Runs form a tree by ``parent_run_id`` (or, without it, the ``dotted_order``
path). An ``llm`` run is a call; ``tool`` and ``retriever`` runs are placed on
the call they fed; every run is a span. ``wrap_anthropic`` moves ``system``
into ``messages[0]`` and collapses response content, so the request is rebuilt
(flag ``request_reconstructed``); ``extra.invocation_params`` and the
``ls_*`` metadata fill params the inputs lack. Input token counts include
cached tokens; the table keeps uncached input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipelines.formats import genai_content as gc
from pipelines.formats import openinference
from pipelines.formats.base import (
    Fragment,
    Normalized,
    RawRecord,
    SourceRef,
    each_record,
    known_kind,
    parse_time,
    table_records,
)
from pipelines.record.anthropic_shape import normalize_finish_reason, request_columns
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

FORMAT = "langsmith"
SPAN_KINDS = {"llm": "llm_call", "tool": "tool", "retriever": "retrieval", "chain": "chain", "prompt": "prompt"}
JSON_COLUMNS = ("inputs", "outputs", "extra", "events", "feedback_stats", "feedbacks", "serialized", "error")
RUN_COLUMNS = {
    "id", "trace_id", "parent_run_id", "dotted_order", "name", "run_type", "start_time", "end_time", "status",
    "error", "inputs", "outputs", "extra", "tags", "feedbacks", "prompt_tokens", "completion_tokens",
    "total_tokens", "total_cost", "first_token_time",
}  # fmt: skip
SAMPLING = ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop_sequences")


def _parent_from_dotted_order(dotted: str | None) -> str | None:
    """``{ts}Z{id}.{ts}Z{id}``: the parent is the id of the second-to-last segment."""
    if not dotted:
        return None
    segments = dotted.split(".")
    return segments[-2].split("Z", 1)[1] if len(segments) > 1 and "Z" in segments[-2] else None


def _usage(run: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any] | None:
    meta = outputs.get("usage_metadata") or ((run.get("extra") or {}).get("metadata") or {}).get("usage_metadata")
    if isinstance(meta, Mapping):
        details = meta.get("input_token_details") or {}
        reported, cache_read = meta.get("input_tokens"), details.get("cache_read")
        cache_write = details.get("cache_creation")
        total, output = meta.get("total_tokens"), meta.get("output_tokens")
    else:
        details = gc.parse_json(run.get("prompt_token_details")) or {}
        reported, output, total = run.get("prompt_tokens"), run.get("completion_tokens"), run.get("total_tokens")
        cache_read, cache_write = details.get("cache_read"), details.get("cache_creation")
    cost = run.get("total_cost")
    if all(v is None for v in (reported, output, total, cost)):
        return None
    uncached = None if reported is None else int(reported) - int(cache_read or 0) - int(cache_write or 0)
    return {
        "input_tokens": uncached,
        "output_tokens": None if output is None else int(output),
        "cache_read_input_tokens": None if cache_read is None else int(cache_read),
        "cache_write_input_tokens": None if cache_write is None else int(cache_write),
        "total_tokens": None if total is None else int(total),
        "cost_usd": None if cost is None else float(cost),
    }


def _request(inputs: Mapping[str, Any]) -> dict[str, Any]:
    request = openinference.request_as_sent(inputs)
    messages = [m for m in request.get("messages") or [] if isinstance(m, Mapping)]
    system = [m for m in messages if m.get("role") == "system"]
    if system and "system" not in request:
        # wrap_anthropic moved the system prompt into the messages
        request["system"] = gc.output_text([gc.role_content_message(m) for m in system])
        request["messages"] = [m for m in messages if m.get("role") != "system"]
    return request


def _output_columns(outputs: Mapping[str, Any]) -> dict[str, Any]:
    if "generations" in outputs:  # LangChain
        generation = ((outputs.get("generations") or [[]])[0] or [{}])[0] or {}
        message = generation.get("message") or {}
        text = generation.get("text")
        row = {"role": "assistant", "name": None, "parts": gc.content_parts(text)}
        info = generation.get("generation_info") or {}
        native = info.get("stop_reason") or info.get("finish_reason")
        kwargs = message.get("kwargs") if isinstance(message, Mapping) else None
        if isinstance(kwargs, Mapping) and kwargs.get("tool_calls"):
            row["parts"] += [gc.openai_tool_call(c) for c in kwargs["tool_calls"]]
        return {"output_messages": [row], "output_text": text, "stop_reason_native": native}
    content = outputs.get("content")
    row = gc.role_content_message(
        {"role": outputs.get("role") or "assistant", "content": content, "tool_calls": outputs.get("tool_calls")}
    )
    if isinstance(content, list) and outputs.get("tool_calls"):
        # blocks already hold the tool_use; the OpenAI-style copy is the same call
        row = gc.role_content_message({"role": outputs.get("role") or "assistant", "content": content})
    return {
        "output_messages": [row],
        "output_text": gc.output_text([row]),
        "response_id": outputs.get("id"),
        "response_model": outputs.get("model"),
        "stop_reason_native": outputs.get("stop_reason"),
    }


def _feedback_item(fb: Mapping[str, Any], fallback_id: str) -> dict[str, Any]:
    score = fb.get("score")
    value = fb.get("value")
    source = fb.get("feedback_source") or {}
    return {
        "source": f"langsmith:{(source.get('type') if isinstance(source, Mapping) else None) or 'api'}",
        "name": fb.get("key"),
        "value_number": None if score is None else float(score),
        "value_string": None if value is None else (value if isinstance(value, str) else canonical_json(value)),
        "comment": fb.get("comment"),
        "created_at": parse_time(fb.get("created_at"), "created_at"),
        "id": str(fb.get("id") or fallback_id),
        "target_level": "call",
    }


def _run(value: dict[str, Any], source: SourceRef, line: int, out: Normalized) -> None:
    run = {k: (gc.parse_json(v) if k in JSON_COLUMNS else v) for k, v in value.items()}
    if not run.get("id") or not run.get("trace_id"):
        raise RecordError("missing_field", "run has no id or trace_id")
    start = parse_time(run.get("start_time"), "start_time")
    if start is None:
        raise RecordError("missing_field", "run has no start_time")
    end = parse_time(run.get("end_time"), "end_time")
    run_id, trace_id = str(run["id"]), str(run["trace_id"])
    parent = run.get("parent_run_id") or _parent_from_dotted_order(run.get("dotted_order"))
    extra = run.get("extra") if isinstance(run.get("extra"), Mapping) else {}
    metadata = extra.get("metadata") or {}
    inputs = run.get("inputs") if isinstance(run.get("inputs"), Mapping) else {}
    outputs = run.get("outputs") if isinstance(run.get("outputs"), Mapping) else {}
    failed = run.get("status") == "error" or bool(run.get("error"))
    session = metadata.get("session_id") or metadata.get("thread_id") or metadata.get("conversation_id")
    common = {
        "trace_id": trace_id,
        "span_id": run_id,
        "parent_span_id": None if parent is None else str(parent),
        "session_id": session,
        "source_format": FORMAT,
        "source_uri": source.uri,
        "source_etag": source.etag,
        "source_line": line,
        "occurred_at": start,
        "ended_at": end,
    }
    run_type = str(run.get("run_type") or "chain")
    for i, fb in enumerate(run.get("feedbacks") or []):
        if isinstance(fb, Mapping):
            item = _feedback_item(fb, sha256_hex(f"{run_id}|feedbacks|{i}")[:32])
            out.fragments.append(Fragment("feedback", trace_id, run_id, item, at=item["created_at"]))
    if run_type == "llm":
        request = _request(inputs) if isinstance(inputs.get("messages"), list) else {}
        cols = request_columns(request) if request else {}
        invocation = extra.get("invocation_params") or {}
        params = dict(cols.get("params") or {})
        fallbacks = {
            "max_tokens": metadata.get("ls_max_tokens"),
            "temperature": metadata.get("ls_temperature"),
            "stop_sequences": metadata.get("ls_stop"),
        }
        for key in SAMPLING:
            if params.get(key) is None:
                params[key] = invocation.get(key, invocation.get("stop" if key == "stop_sequences" else key))
            if params.get(key) is None:
                params[key] = fallbacks.get(key)
        cols["params"] = params
        cols.update({k: v for k, v in _output_columns(outputs).items() if v is not None})
        native = cols.get("stop_reason_native")
        call = new_call(
            **common,
            first_token_at=parse_time(run.get("first_token_time"), "first_token_time"),
            user_id=metadata.get("user_id")
            or ((inputs.get("metadata") or {}).get("user_id") if isinstance(inputs.get("metadata"), Mapping) else None),
            tags=list(run["tags"]) if run.get("tags") else None,
            provider=metadata.get("ls_provider"),
            usage=_usage(run, outputs),
            finish_reason=normalize_finish_reason(native),
            status="error" if failed else "ok",
            error_message=str(run["error"]) if run.get("error") else None,
            flags=["request_reconstructed"] if request else None,
        )
        call.update({k: v for k, v in cols.items() if v is not None})
        call["request_model"] = cols.get("request_model") or metadata.get("ls_model_name") or invocation.get("model")
        unmapped = {k: v for k, v in run.items() if k not in RUN_COLUMNS and v not in (None, "", [], {})}
        unmapped["extra"] = {k: v for k, v in extra.items() if k != "invocation_params"} or None
        call["extra_json"] = canonical_json({k: v for k, v in unmapped.items() if v is not None})
        call = finalize_call(call)
        out.calls.append(call)
        out.spans.append(span_for_call(call, attributes_json=canonical_json({"name": run.get("name")})))
        return
    out.spans.append(
        finalize_span(
            new_span(
                **common,
                kind=known_kind(SPAN_KINDS.get(run_type, run_type)),
                name=run.get("name"),
                status="error" if failed else "ok",
                tool_name=run.get("name") if run_type == "tool" else None,
                attributes_json=canonical_json({k: v for k, v in run.items() if v not in (None, "", [], {})}),
            )
        )
    )
    if run_type == "tool":
        output = outputs.get("output", outputs) if outputs else None
        payload = {
            "span_id": run_id,
            "tool_call_id": inputs.get("tool_call_id") or metadata.get("tool_call_id"),
            "name": run.get("name"),
            "arguments_json": gc.json_or_none(inputs.get("input", inputs) if inputs else None),
            "result_json": gc.json_or_none(output),
            "is_error": failed,
            "started_at": start,
            "ended_at": end,
        }
        out.fragments.append(
            Fragment("tool_execution", trace_id, None, payload, common["parent_span_id"], end or start)
        )
    elif run_type == "retriever":
        docs = []
        for rank, doc in enumerate(outputs.get("documents") or [], start=1):
            doc = doc if isinstance(doc, Mapping) else {"page_content": doc}
            meta = doc.get("metadata") or {}
            docs.append(document_row(meta.get("id"), rank, meta.get("score"), doc.get("page_content")))
        payload = {
            "embedding_model": None,
            "index_snapshot": None,
            "query_text": inputs.get("query"),
            "documents": docs,
        }
        out.fragments.append(Fragment("retrieval", trace_id, None, payload, common["parent_span_id"], start))


def _feedback(value: dict[str, Any], out: Normalized) -> None:
    if not value.get("run_id") or not value.get("trace_id"):
        raise RecordError("missing_field", "feedback has no run_id or trace_id")
    item = _feedback_item(value, sha256_hex(canonical_json(value))[:32])
    out.fragments.append(
        Fragment("feedback", str(value["trace_id"]), str(value["run_id"]), item, at=item["created_at"])
    )


def _is_feedback(value: Any) -> bool:
    return isinstance(value, dict) and "run_id" in value and "key" in value


def normalize(data: bytes, source: SourceRef, *, lines: bool = False) -> Normalized:
    out = Normalized()

    def handle(item: RawRecord) -> None:
        if not isinstance(item.value, dict):
            raise RecordError("wrong_type", f"expected a JSON object, got {type(item.value).__name__}")
        if _is_feedback(item.value):
            _feedback(item.value, out)
        else:
            _run(item.value, source, item.line, out)

    each_record(table_records(data, lines=lines), out, handle)
    return out


def looks_like(record: Any) -> bool:
    if _is_feedback(record):
        return True
    return isinstance(record, dict) and "run_type" in record and ("dotted_order" in record or "trace_id" in record)
