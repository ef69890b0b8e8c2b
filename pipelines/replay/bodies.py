"""The request each replay mode sends, and what comes back, as plain data.

Requests are the LLM resource's ``LLMRequest`` (``pipelines.llm.request``, plain
data): the core plans them and matches results by their content address.

- capture: the recorded request, as sent;
- pinned: the recorded request at temperature 0 (top_p / top_k dropped: the
  Messages API has no seed, so temperature 0 is all that pins it);
- class_rate: the recorded request at its production params, N samples;
- diff: the recorded request with the candidate's changes, the system prompt
  re-rendered from the call's frozen ingredients (recorded variables, recorded
  document texts and scores, the call's own clock) when the candidate changes
  the template; sent beside a ``baseline`` replay of the recorded request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pipelines.llm.request import LLMRequest
from pipelines.record.anthropic_shape import normalize_finish_reason
from pipelines.replay.candidates import Candidate
from pipelines.rot.render import render_template

BASELINE = "baseline"


def replay_request(
    body: dict[str, Any],
    mode: str,
    sample_index: int = 0,
    candidate: str | None = None,
    call_id: str | None = None,
    substituted_from: str | None = None,
    seal: Callable[[Any], Any] | None = None,
    cache_prefix: bool = True,
) -> LLMRequest:
    return LLMRequest(
        body=body,
        purpose="replay",
        mode=mode,
        sample_index=sample_index,
        candidate=candidate,
        call_id=call_id,
        substituted_from=substituted_from,
        seal=seal,
        cache_prefix=cache_prefix,
    )


@dataclass(frozen=True)
class Answer:
    """What a replayed request produced (or why it produced nothing)."""

    status: str
    text: str | None = None
    finish_reason: str | None = None
    tool_calls: tuple[tuple[str, str], ...] = ()
    model: str | None = None
    content: tuple[dict[str, Any], ...] = ()
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    cost_usd: float = 0.0
    simulated: bool = False
    request_key: str | None = None
    # parameters the API refused that were removed before sending
    dropped: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "succeeded" and self.finish_reason is not None


def tool_calls_of(content: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    """(name, canonical arguments) of every tool_use block."""
    return tuple(
        (b.get("name") or "", json.dumps(b.get("input") or {}, sort_keys=True, ensure_ascii=False))
        for b in content
        if b.get("type") == "tool_use"
    )


def answer_of(result: Any) -> Answer:
    """An ``LLMResult`` (CONTRACTS.md) -> Answer."""
    response = result.response or {}
    content = tuple(response.get("content") or ())
    text = "".join(b.get("text") or "" for b in content if b.get("type") == "text") if response else None
    return Answer(
        status=result.status,
        text=text,
        finish_reason=normalize_finish_reason(response.get("stop_reason")),
        tool_calls=tool_calls_of(content),
        model=response.get("model") or result.model,
        content=content,
        error=result.error,
        input_tokens=result.input_tokens or 0,
        output_tokens=result.output_tokens or 0,
        cache_read_input_tokens=result.cache_read_input_tokens or 0,
        cache_write_input_tokens=result.cache_write_input_tokens or 0,
        cost_usd=result.cost_usd or 0.0,
        simulated=bool(result.simulated),
        request_key=result.key,
        dropped=tuple(getattr(result, "dropped", ()) or ()),
    )


def recorded_answer(call: Mapping[str, Any]) -> Answer:
    """The call's own recorded output, as an Answer."""
    content: list[dict[str, Any]] = []
    for message in call.get("output_messages") or []:
        for part in message.get("parts") or []:
            if part.get("native_json"):
                content.append(json.loads(part["native_json"]))
    return Answer(
        status="recorded" if call.get("finish_reason") else "missing",
        text=call.get("output_text"),
        finish_reason=call.get("finish_reason"),
        tool_calls=tool_calls_of(content),
        model=call.get("response_model"),
        content=tuple(content),
    )


def recorded_request(call: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(call["request_json"])


def pinned(request: Mapping[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in request.items() if k not in ("top_p", "top_k")}
    body["temperature"] = 0
    return body


def recorded_documents(call: Mapping[str, Any]) -> list[dict[str, Any]]:
    docs = sorted(
        (call.get("retrieval") or {}).get("documents") or [], key=lambda d: (d.get("rank") is None, d.get("rank") or 0)
    )
    return [{"doc_id": d["doc_id"], "text": d.get("text"), "score": d.get("score")} for d in docs]


def with_candidate(
    call: Mapping[str, Any], request: Mapping[str, Any], candidate: Candidate, template_source: str | None
) -> dict[str, Any]:
    """The recorded request with the candidate's changes (see the module docstring)."""
    body = dict(request)
    if template_source is not None:
        variables = json.loads(call.get("template_variables_json") or "{}")
        clock = call.get("occurred_at") or datetime.fromisoformat("2000-01-01T00:00:00+00:00")
        body["system"] = render_template(template_source, variables, recorded_documents(call), clock=clock)
    if candidate.model:
        body["model"] = candidate.model
    for key, value in candidate.params.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    if candidate.tools is not None:
        body["tools"] = [dict(t) for t in candidate.tools]
    return body
