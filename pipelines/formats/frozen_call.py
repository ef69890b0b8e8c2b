"""Frozen-call JSON v1: tracelake's own trace format.

One document per model call, written by the capture helper or by an
application that freezes its traces carefully: every name (template version,
doc id, model alias) sits next to the value it resolved to at capture time.
A ``.json`` object holds one document (or an array of them); a ``.jsonl``
object holds one per line. The JSON Schema is published next to this module
(``frozen_call_v1.schema.json``) and generated from the models below.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from pipelines.formats.assembly import with_feedback_ids
from pipelines.formats.base import (
    Normalized,
    SourceRef,
    UtcDatetime,
    normalize_records,
    validated_object,
)
from pipelines.record.anthropic_shape import request_columns_and_plain, response_columns, usage_row
from pipelines.record.canonical import call_id, canonical_json, sha256_hex
from pipelines.record.rows import document_row, finalize_call, new_call, span_for_call

FORMAT = "frozen_call"
FORMAT_TAG = "tracelake.frozen_call"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PromptRef(_Model):
    template_id: str | None = None
    version: str | None = None
    label: str | None = None
    variables: dict[str, Any] | None = None


class ModelRef(_Model):
    id: str = Field(description="The model name as sent (request.model).")
    alias: str | None = Field(None, description="The application-level alias id was resolved from, if any.")
    resolved_snapshot: str | None = Field(None, description="The dated snapshot that served the call.")
    endpoint: str | None = None
    provider: str = "anthropic"


class Sampling(_Model):
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop_sequences: list[str] | None = None


class Retrieval(_Model):
    embedding_model: str | None = None
    index_snapshot: str | None = None
    query: str | None = None
    doc_ids: list[str] = Field(default_factory=list)
    scores: list[float] | None = None
    texts: list[str | None] | None = Field(None, description="Document texts as retrieved, aligned with doc_ids.")
    tokens: list[int] | None = None

    @pydantic.model_validator(mode="after")
    def _aligned(self) -> Retrieval:
        for name in ("scores", "texts", "tokens"):
            values = getattr(self, name)
            if values is not None and len(values) != len(self.doc_ids):
                raise ValueError(f"retrieval.{name} has {len(values)} items; doc_ids has {len(self.doc_ids)}")
        return self


class Usage(_Model):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None


class Feedback(_Model):
    source: str = "user"
    name: str = "thumbs"
    value: float | str | None = Field(None, description="A score, or 'up' / 'down'.")
    comment: str | None = None
    at: UtcDatetime | None = None


class Error(_Model):
    type: str
    message: str | None = None


class ToolExecution(_Model):
    tool_call_id: str
    name: str | None = None
    arguments: Any = None
    result: Any = None
    is_error: bool = False
    started_at: UtcDatetime | None = None
    ended_at: UtcDatetime | None = None


class Response(BaseModel):
    """The provider response body as received (Anthropic Messages shape)."""

    model_config = ConfigDict(extra="allow")
    id: str | None = None
    model: str | None = None
    role: str | None = "assistant"
    content: list[dict[str, Any]] = Field(default_factory=list)
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: dict[str, Any] | None = None


class FrozenCallV1(BaseModel):
    """One model call, frozen with everything needed to replay it."""

    model_config = ConfigDict(extra="allow", title="tracelake frozen-call JSON v1")

    format: Literal["tracelake.frozen_call"] = FORMAT_TAG
    version: Literal[1] = 1
    trace_id: str = Field(min_length=1)
    span_id: str | None = Field(None, description="Defaults to the response id, else a hash of trace id and time.")
    parent_span_id: str | None = None
    session_id: str | None = None
    conversation_id: str | None = None
    user_id: str | None = None
    captured_at: UtcDatetime | None = None
    occurred_at: UtcDatetime
    ended_at: UtcDatetime | None = None
    first_token_at: UtcDatetime | None = None
    service: str | None = Field(None, description="The route or feature that made the call.")
    environment: str | None = None
    service_sha: str | None = None
    tags: list[str] | None = None
    segment: dict[str, str] | None = Field(None, description="user_tier, language, feature_flag, ...")
    prompt: PromptRef | None = None
    model: ModelRef
    sampling: Sampling | None = None
    request: dict[str, Any] | None = Field(None, description="The provider request body exactly as sent.")
    rendered_request_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    rendered_request_path: str | None = None
    block_tokens: dict[str, int] | None = None
    retrieval: Retrieval | None = None
    tool_executions: list[ToolExecution] | None = None
    response: Response | None = None
    output_text: str | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    latency_ms: float | None = None
    cost_usd: float | None = None
    feedback: list[Feedback] | Feedback | None = None
    eval_score: float | None = None
    error: Error | None = None
    escalated: bool = False
    guardrail_hit: bool = False
    flags: list[str] | None = None
    previous_response_id: str | None = None
    content_captured: bool | None = None
    truncated: bool = False


def json_schema() -> dict[str, Any]:
    """The published JSON Schema (draft 2020-12) of a frozen-call v1 document."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://tracelake.dev/schemas/frozen_call_v1.schema.json",
        **FrozenCallV1.model_json_schema(),
    }


def _json_or_none(value: Any) -> str | None:
    return None if value is None else canonical_json(value)


def _feedback_rows(feedback: Any) -> list[dict[str, Any]]:
    items = list(feedback) if isinstance(feedback, list) else [] if feedback is None else [feedback]
    return [
        {
            "source": f.source,
            "name": f.name,
            "value_number": f.value if isinstance(f.value, (int, float)) else None,
            "value_string": f.value if isinstance(f.value, str) else None,
            "comment": f.comment,
            "created_at": f.at,
        }
        for f in items
    ]


def _retrieval_row(r: Any) -> dict[str, Any] | None:
    if r is None:
        return None
    docs = [
        document_row(
            doc_id,
            i + 1,
            r.scores[i] if r.scores else None,
            r.texts[i] if r.texts else None,
            r.tokens[i] if r.tokens else None,
        )
        for i, doc_id in enumerate(r.doc_ids)
    ]
    return {
        "embedding_model": r.embedding_model,
        "index_snapshot": r.index_snapshot,
        "query_text": r.query,
        "documents": docs,
    }


def to_call(doc: FrozenCallV1, source: SourceRef, line: int | None, source_format: str = FORMAT) -> dict[str, Any]:
    """A validated document -> a finalized `calls` row."""
    request = doc.request
    call = new_call(
        trace_id=doc.trace_id,
        parent_span_id=doc.parent_span_id,
        session_id=doc.session_id,
        conversation_id=doc.conversation_id,
        user_id=doc.user_id,
        source_format=source_format,
        source_uri=source.uri,
        source_etag=source.etag,
        source_line=line,
        occurred_at=doc.occurred_at,
        ended_at=doc.ended_at,
        first_token_at=doc.first_token_at,
        latency_ms=doc.latency_ms,
        service=doc.service,
        environment=doc.environment,
        release=doc.service_sha,
        tags=doc.tags,
        segment=doc.segment,
        provider=doc.model.provider,
        request_model=doc.model.id,
        model_alias=doc.model.alias,
        response_model=doc.model.resolved_snapshot,
        endpoint=doc.model.endpoint,
        rendered_request_sha256=doc.rendered_request_sha256,
        rendered_request_uri=doc.rendered_request_path,
        retrieval=_retrieval_row(doc.retrieval),
        eval_score=doc.eval_score,
        escalated=doc.escalated,
        guardrail_hit=doc.guardrail_hit,
        flags=doc.flags,
        feedback=_feedback_rows(doc.feedback),
        previous_response_id=doc.previous_response_id,
        content_captured=doc.content_captured,
        truncated=doc.truncated,
    )
    if doc.prompt is not None:
        call.update(
            template_id=doc.prompt.template_id,
            template_version=doc.prompt.version,
            template_label=doc.prompt.label,
            template_variables_json=_json_or_none(doc.prompt.variables),
        )
    plain_request = None
    if request is not None:
        columns, plain_request = request_columns_and_plain(request)
        call.update(columns)
        if call["request_model"] != doc.model.id:
            # the body is what was sent; keep it, and say the record disagrees with itself
            call["flags"] = [*(call["flags"] or []), "model_id_mismatch"]
    # dict(model): its fields as they are; these models hold only plain values, so it is model_dump() without the walk
    sampling = dict(doc.sampling) if doc.sampling else {}
    params = dict(call.get("params") or {})
    for key, value in sampling.items():
        if params.get(key) is None:
            params[key] = value  # seed, or params the body sent via a proxy
    call["params"] = params
    if doc.response is not None:
        cols = response_columns(doc.response.model_dump(exclude_none=True))
        cols["response_model"] = cols["response_model"] or doc.model.resolved_snapshot
        call.update(cols)
    if doc.output_text is not None:
        call["output_text"] = doc.output_text
    if doc.finish_reason is not None:
        call["finish_reason"] = doc.finish_reason
    if doc.usage is not None:
        call["usage"] = usage_row(dict(doc.usage), doc.cost_usd)
    elif call.get("usage") is not None:
        call["usage"]["cost_usd"] = doc.cost_usd
    elif doc.cost_usd is not None:
        call["usage"] = usage_row({}, doc.cost_usd)
    if doc.tool_executions:
        call["tool_executions"] = [
            {
                "span_id": None,
                "tool_call_id": t.tool_call_id,
                "name": t.name,
                "arguments_json": _json_or_none(t.arguments),
                "result_json": _json_or_none(t.result),
                "is_error": t.is_error,
                "started_at": t.started_at,
                "ended_at": t.ended_at,
            }
            for t in doc.tool_executions
        ]
    if doc.error is not None:
        call.update(status="error", error_type=doc.error.type, error_message=doc.error.message)
    else:
        call["status"] = "ok"
    call["span_id"] = (
        doc.span_id or call.get("response_id") or sha256_hex(f"{doc.trace_id}|{doc.occurred_at.isoformat()}")[:16]
    )
    extra = doc.model_extra or {}
    call["extra_json"] = canonical_json(extra) if extra else None
    if call["feedback"]:
        # the document gives its feedback no ids: derived now, from fields redaction leaves alone
        identity = call_id(source_format, doc.trace_id, call["span_id"])
        call["feedback"] = with_feedback_ids(identity, call["feedback"], stored=False)
    return finalize_call(call, doc.block_tokens, plain_request=plain_request)


def validate(value: Any) -> FrozenCallV1:
    """A frozen-call document, validated by pydantic, or RecordError with its message."""
    return validated_object(FrozenCallV1, value, "a frozen-call v1 document")


def normalize(data: bytes, source: SourceRef, *, lines: bool = False) -> Normalized:
    return normalize_records(
        data, lines=lines, build=lambda item: to_call(validate(item.value), source, item.line), span_of=span_for_call
    )


def looks_like(record: Any) -> bool:
    return isinstance(record, dict) and (
        record.get("format") == FORMAT_TAG or ("model" in record and "occurred_at" in record and "trace_id" in record)
    )


def dumps(doc: dict[str, Any]) -> str:
    """Serialize a frozen-call document the way tracelake writes them."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=str)
