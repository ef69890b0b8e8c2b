"""Flat agent log lines (JSON Lines): one structured log line per agent step.

The shape many teams ship instead of event-sourced logs: one flat object per
line with ``ts``, ``session_id``, ``trace_id``, ``step_index``,
``event_type``, ``agent_version``, ``model``, ``provider``, ``tokens_in``,
``tokens_out``, ``cost_usd``, ``latency_ms``, ``tool_called``,
``tool_success``, ``semantic_error``, ``user_tier``, ``feature_flag``.

Every line becomes a span: tokens and cost in the span's columns (the
`traces` rollup sums them), the whole line in ``attributes_json`` so every
field the source sent (agent_version, semantic_error, tool_success,
user_tier, feature_flag, and any others) can be read back. A line that also
carries a ``prompt`` (a message array, as in agent_events' llm.call) is a call
as well. Lines of different sessions may be interleaved in any order.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from pipelines.formats import frozen_call
from pipelines.formats.agent_events import prompt_document
from pipelines.formats.base import (
    Normalized,
    RawRecord,
    SourceRef,
    UtcDatetime,
    each_record,
    json_records,
    known_kind,
    validated_object,
    validation_message,
)
from pipelines.record.canonical import canonical_json, sha256_hex
from pipelines.record.rows import RecordError, finalize_span, new_span, span_for_call

FORMAT = "agent_log_lines"

# event_type words seen in flat logs -> spans.kind (others via known_kind)
KIND_WORDS = {
    "llm": "llm_call",
    "llm_call": "llm_call",
    "llm_request": "llm_call",
    "completion": "llm_call",
    "chat": "llm_call",
    "model_call": "llm_call",
    "tool": "tool",
    "tool_call": "tool",
    "tool_invoke": "tool",
    "tool_use": "tool",
    "think": "think",
    "agent_think": "think",
    "reasoning": "think",
    "plan": "think",
    "state": "state",
    "state_mutate": "state",
    "memory_write": "state",
    "session_start": "session_start",
    "start": "session_start",
    "session_end": "session_end",
    "end": "session_end",
    "final_answer": "session_end",
}


class LogLine(BaseModel):
    model_config = ConfigDict(extra="allow")

    ts: UtcDatetime
    session_id: str = Field(min_length=1)
    trace_id: str | None = None
    step_index: int = Field(ge=0)
    event_type: str = Field(min_length=1)
    agent_version: str | None = None
    model: str | None = None
    provider: str | None = None
    tokens_in: int | None = Field(None, ge=0)
    tokens_out: int | None = Field(None, ge=0)
    cost_usd: float | None = Field(None, ge=0, allow_inf_nan=False)
    latency_ms: float | None = Field(None, ge=0, allow_inf_nan=False)
    tool_called: str | bool | None = None
    tool_success: bool | None = None
    semantic_error: bool | str | None = None
    user_tier: str | None = None
    feature_flag: str | bool | None = None

    @property
    def failed(self) -> bool:
        return self.tool_success is False or self.semantic_error not in (None, False, "")


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def kind_of(event_type: str) -> str:
    word = event_type.lower().replace(".", "_").replace("-", "_")
    return KIND_WORDS.get(word) or known_kind(word)


def _line(raw: RawRecord) -> LogLine:
    return validated_object(LogLine, raw.value, "an agent log line")


def _span_id(line: LogLine) -> str:
    # flat lines carry no event id: the step of the session at its time names it
    given = (line.model_extra or {}).get("event_id") or (line.model_extra or {}).get("span_id")
    if isinstance(given, str) and given:
        return given
    return sha256_hex(f"{line.session_id}|{line.step_index}|{line.event_type}|{line.ts.isoformat()}")[:16]


def _segment(line: LogLine) -> dict[str, str] | None:
    segment = {
        k: str(v) for k, v in (("user_tier", line.user_tier), ("feature_flag", line.feature_flag)) if v is not None
    }
    return segment or None


def _call(line: LogLine, raw: RawRecord, source: SourceRef, trace_id: str, span_id: str) -> dict[str, Any]:
    fields = {k: v for k, v in raw.value.items() if k not in LogLine.model_fields or k in ("model", "provider")}
    fields.update(
        prompt_tokens=line.tokens_in,
        completion_tokens=line.tokens_out,
        cost_usd=line.cost_usd,
        latency_ms=line.latency_ms,
    )
    doc = prompt_document(fields)
    doc.update(
        trace_id=trace_id,
        span_id=span_id,
        session_id=line.session_id,
        occurred_at=line.ts,
        service_sha=line.agent_version,
        segment=_segment(line),
    )
    if line.semantic_error not in (None, False, ""):
        doc["flags"] = ["semantic_error"]
    try:
        validated = frozen_call.FrozenCallV1.model_validate(doc)
    except pydantic.ValidationError as e:
        raise RecordError("invalid_record", f"agent log line with a prompt: {validation_message(e)}") from None
    return frozen_call.to_call(validated, source, raw.line, source_format=FORMAT)


def normalize(data: bytes, source: SourceRef, *, lines: bool = True) -> Normalized:
    out = Normalized()

    def handle(raw: RawRecord) -> None:
        line = _line(raw)
        trace_id = line.trace_id or line.session_id
        span_id = _span_id(line)
        kind = kind_of(line.event_type)
        attributes = canonical_json({k: v for k, v in raw.value.items() if k != "prompt" and k != "response"})
        if isinstance(raw.value.get("prompt"), list):
            call = _call(line, raw, source, trace_id, span_id)
            span = span_for_call(call, step_index=line.step_index, attributes_json=attributes)
            out.calls.append(call)
            out.spans.append(span)
            return
        ended = line.ts + timedelta(milliseconds=line.latency_ms) if line.latency_ms is not None else None
        tool = line.tool_called if isinstance(line.tool_called, str) and line.tool_called else None
        out.spans.append(
            finalize_span(
                new_span(
                    trace_id=trace_id,
                    span_id=span_id,
                    session_id=line.session_id,
                    user_id=_text_or_none((line.model_extra or {}).get("user_id")),
                    source_format=FORMAT,
                    source_uri=source.uri,
                    source_etag=source.etag,
                    source_line=raw.line,
                    kind="tool" if kind == "other" and tool else kind,
                    name=line.event_type,
                    step_index=line.step_index,
                    occurred_at=line.ts,
                    ended_at=ended,
                    duration_ms=line.latency_ms,
                    status="error" if line.failed else "ok",
                    tool_name=tool,
                    input_tokens=line.tokens_in,
                    output_tokens=line.tokens_out,
                    cost_usd=line.cost_usd,
                    attributes_json=attributes,
                )
            )
        )

    each_record(json_records(data, lines=lines), out, handle)
    return out


def looks_like(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and "event_type" in record
        and "session_id" in record
        and "ts" in record
        and "payload" not in record
    )
