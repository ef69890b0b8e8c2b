"""One captured call -> a frozen-call JSON v1 document (see formats/frozen_call.py).

The request is the body as sent (the SDK's exact bytes, so sampling params
passed through ``extra_body`` are in it), and ``rendered_request_sha256`` is
its hash per the hashing spec: re-rendering the ingredients later proves the
request was reproduced.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pipelines.record.canonical import request_sha256

FORMAT_TAG = "tracelake.frozen_call"
SAMPLING = ("temperature", "top_p", "top_k", "max_tokens", "seed", "stop_sequences")


@dataclass
class Ingredients:
    """What the application knows that the request body does not say: the template
    and variables it rendered, the documents it retrieved, the ids of the trace."""

    template_id: str | None = None
    template_version: str | None = None
    template_label: str | None = None
    variables: dict[str, Any] | None = None
    model_alias: str | None = None
    retrieval: dict[str, Any] | None = None  # embedding_model, index_snapshot, query, doc_ids, scores, texts
    trace_id: str | None = None
    span_id: str | None = None
    parent_span_id: str | None = None
    session_id: str | None = None
    conversation_id: str | None = None
    user_id: str | None = None
    service: str | None = None
    environment: str | None = None
    tags: list[str] | None = None
    segment: dict[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, value: Ingredients | dict[str, Any] | None) -> Ingredients:
        if value is None:
            return cls()
        if isinstance(value, Ingredients):
            return value
        known = {k: v for k, v in value.items() if k in cls.__dataclass_fields__ and k != "extra"}
        return cls(**known, extra={k: v for k, v in value.items() if k not in known})


def frozen_call(
    request: dict[str, Any],
    response: dict[str, Any] | None,
    *,
    started_at: datetime,
    ended_at: datetime,
    first_token_at: datetime | None,
    ingredients: Ingredients,
    request_id: str | None = None,
    error: BaseException | None = None,
    defaults: Ingredients | None = None,
) -> dict[str, Any]:
    ing, base = ingredients, defaults or Ingredients()

    def pick(name: str) -> Any:
        value = getattr(ing, name)
        return value if value is not None else getattr(base, name)

    metadata = request.get("metadata") if isinstance(request.get("metadata"), dict) else {}
    response = response or {}
    thread = request.get("thread") if isinstance(request.get("thread"), dict) else {}
    doc: dict[str, Any] = {
        "format": FORMAT_TAG,
        "version": 1,
        "trace_id": pick("trace_id") or uuid.uuid4().hex,
        "span_id": pick("span_id") or response.get("id") or uuid.uuid4().hex[:16],
        "parent_span_id": pick("parent_span_id"),
        "session_id": pick("session_id"),
        "conversation_id": pick("conversation_id"),
        "user_id": pick("user_id") or metadata.get("user_id"),
        "captured_at": ended_at.isoformat(),
        "occurred_at": started_at.isoformat(),
        "ended_at": ended_at.isoformat(),
        "first_token_at": first_token_at.isoformat() if first_token_at else None,
        "latency_ms": (ended_at - started_at).total_seconds() * 1000.0,
        "service": pick("service"),
        "environment": pick("environment"),
        "tags": pick("tags"),
        "segment": pick("segment"),
        "model": {
            "id": request.get("model"),
            "alias": pick("model_alias"),
            "resolved_snapshot": response.get("model"),
            "provider": "anthropic",
        },
        "sampling": {k: request.get(k) for k in SAMPLING if request.get(k) is not None} or None,
        "request": request,
        "rendered_request_sha256": request_sha256(request),
        "previous_response_id": thread.get("previous_message_id"),
        "provider_request_id": request_id,
    }
    if any(getattr(ing, n) is not None for n in ("template_id", "template_version", "variables")):
        doc["prompt"] = {
            "template_id": ing.template_id,
            "version": ing.template_version,
            "label": ing.template_label,
            "variables": ing.variables,
        }
    if ing.retrieval is not None:
        doc["retrieval"] = ing.retrieval
    if response:
        doc["response"] = response
        usage = response.get("usage") or {}
        doc["usage"] = {
            k: usage.get(k)
            for k in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        }
    if error is not None:
        doc["error"] = {"type": type(error).__name__, "message": None}  # the message may quote the request
        status = getattr(error, "status_code", None)
        if status is not None:
            doc["error"]["message"] = f"HTTP {status}"
    doc.update({k: v for k, v in ing.extra.items() if k not in doc})
    return {k: v for k, v in doc.items() if v is not None}


def dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8")
