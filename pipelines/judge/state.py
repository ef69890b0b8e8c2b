"""The state validator: is a trace's message history well formed?

Codes (one violation per problem, in step order; the first of each trace is marked):

- ``history_broken``: step numbers are not 0, 1, 2, ... in order
- ``duplicate_message_id``: two model responses (or two tool uses) carry the same id
- ``call_without_result``: a tool use the history never answers with a result
- ``result_without_call``: a tool result whose id no earlier tool use carries
- ``results_out_of_order``: results answer a turn's tool uses in another order
- ``tool_use_id_mismatch``: a tool event whose call id matches no tool use of the model
- ``message_after_interrupt``: a step after the session ended or a turn was interrupted
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipelines.judge.timeline import Step, Trace
from pipelines.record.canonical import record_sha256, sha256_hex

VERSION = "1"
CODES = (
    "history_broken",
    "duplicate_message_id",
    "call_without_result",
    "result_without_call",
    "results_out_of_order",
    "tool_use_id_mismatch",
    "message_after_interrupt",
)
INTERRUPTED = ("interrupted", "cancelled", "canceled", "aborted")


@dataclass(frozen=True)
class Violation:
    trace_id: str
    code: str
    step_index: int
    detail: str
    session_id: str | None = None
    event_key: str | None = None


def _parts(message: dict, kind: str) -> list[dict]:
    return [p for p in message.get("parts") or [] if p.get("type") == kind]


def _history(trace: Trace) -> tuple[Step | None, list[dict]]:
    """The last model call and its full history: its request's messages, then its output."""
    calls = trace.calls
    if not calls:
        return None, []
    last = calls[-1]
    output = [
        {"role": "assistant", "parts": [{"type": "tool_call", "tool_call_id": u["id"]} for u in last.output_tool_uses]}
    ]
    return last, [*last.messages, *(output if last.output_tool_uses else [])]


def _message_checks(trace: Trace, v: list[Violation]) -> None:
    last, history = _history(trace)
    if last is None:
        return
    tool_steps = {s.tool_call_id for s in trace.steps if s.event_type == "tool.invoke" and s.tool_call_id}
    used: dict[str, int] = {}
    for i, message in enumerate(history):
        uses = [p.get("tool_call_id") for p in _parts(message, "tool_call")]
        results = [p.get("tool_call_id") for p in _parts(message, "tool_result")]
        for rid in results:
            if rid not in used:
                v.append(
                    _v(
                        trace,
                        "result_without_call",
                        last,
                        f"message {i}: tool result {rid} answers no earlier tool use",
                    )
                )
        answered = [r for r in results if r in used]
        expected = [u for u in sorted(used, key=used.get) if u in answered]
        if answered != expected:
            v.append(_v(trace, "results_out_of_order", last, f"message {i}: results {answered} answer uses {expected}"))
        for u in answered:
            used.pop(u, None)
        for uid in uses:
            if uid in used:
                v.append(_v(trace, "duplicate_message_id", last, f"message {i}: tool use id {uid} repeated"))
            used[uid] = i
    # a tool use left open is fine only as the final turn, if a tool event answers it
    for uid, i in used.items():
        if i == len(history) - 1 and uid in tool_steps:
            continue
        v.append(_v(trace, "call_without_result", last, f"message {i}: tool use {uid} never gets a result"))


def _v(trace: Trace, code: str, step: Step, detail: str) -> Violation:
    return Violation(trace.trace_id, code, step.step_index, detail, trace.session_id, step.span_key)


def validate(trace: Trace) -> list[Violation]:
    """Every violation in one trace, in step order."""
    v: list[Violation] = []
    raw = [s.raw_step_index for s in trace.steps]
    if all(r is not None for r in raw):
        for expected, step in enumerate(trace.steps):
            if step.raw_step_index != expected:
                v.append(_v(trace, "history_broken", step, f"step {step.raw_step_index} where step {expected} belongs"))
                break
    seen: dict[str, int] = {}
    uses: dict[str, Step] = {}
    ended: Step | None = None
    for step in trace.steps:
        if ended is not None:
            v.append(
                _v(
                    trace,
                    "message_after_interrupt",
                    step,
                    f"{step.event_type} after step {ended.step_index} ({ended.event_type})",
                )
            )
            ended = None  # once per interrupt
        if step.response_id:
            if step.response_id in seen:
                v.append(
                    _v(trace, "duplicate_message_id", step, f"response id repeats step {seen[step.response_id]}'s")
                )
            seen.setdefault(step.response_id, step.step_index)
        for use in step.output_tool_uses:
            if use.get("id"):
                uses[use["id"]] = step
        if step.event_type == "tool.invoke" and step.tool_call_id and uses and step.tool_call_id not in uses:
            v.append(_v(trace, "tool_use_id_mismatch", step, f"tool call id {step.tool_call_id} matches no tool use"))
        if (
            step.event_type == "session.end"
            or (step.status or "").lower() in INTERRUPTED
            or (step.finish_reason or "").lower() in INTERRUPTED
        ):
            ended = step
    _message_checks(trace, v)
    return sorted(v, key=lambda x: (x.step_index, CODES.index(x.code)))


def violation_rows(traces: list[Trace], occurred: dict[str, Any]) -> list[dict[str, Any]]:
    """`state_violations` rows; ``first_in_trace`` marks each trace's earliest violation."""
    rows: dict[str, dict[str, Any]] = {}
    for trace in traces:
        for n, x in enumerate(validate(trace)):
            row = {
                "violation_id": sha256_hex(f"{x.trace_id}|{x.code}|{x.step_index}|{x.detail}"),
                "trace_id": x.trace_id,
                "session_id": x.session_id,
                "event_key": x.event_key,
                "occurred_date": occurred[x.trace_id],
                "code": x.code,
                "step_index": x.step_index,
                "detail": x.detail,
                "first_in_trace": n == 0,
                "validator_version": VERSION,
            }
            row["record_sha256"] = record_sha256(row, ())
            rows.setdefault(row["violation_id"], row)
    return list(rows.values())
