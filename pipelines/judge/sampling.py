"""Which traces the LLM judge reads, and with what probability.

A trace is judged with probability 1 when a heuristic flagged it, it has negative
feedback, an error or an escalation, or the incident switch is on for its time;
otherwise with the policy's base rate, decided by a stable hash of its trace id
(the same trace is in or out on every run and every machine). Findings store
that probability, so a class's rate is estimated without bias (each finding
weighs 1/p).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pipelines.judge.findings import Finding
from pipelines.judge.policy import Policy
from pipelines.judge.timeline import Trace
from pipelines.record.draws import uniform


@dataclass(frozen=True)
class Selection:
    trace_id: str
    probability: float
    judged: bool
    reasons: tuple[str, ...]


def unit_hash(trace_id: str) -> float:
    """A number in [0, 1) fixed by the trace id."""
    return uniform(f"judge|{trace_id}")


def _reasons(trace: Trace, flagged: set[str], policy: Policy) -> list[str]:
    always = policy.sampling.always
    reasons = []
    if always.heuristic_finding and trace.trace_id in flagged:
        reasons.append("heuristic_finding")
    if always.negative_feedback and any(s.feedback_negative for s in trace.steps):
        reasons.append("negative_feedback")
    if always.error and any(
        (s.status == "error") or (s.event_type == "tool.invoke" and s.tool_success is False) for s in trace.steps
    ):
        reasons.append("error")
    if always.escalated and any(s.escalated for s in trace.steps):
        reasons.append("escalated")
    if trace.steps and policy.incident_on(trace.steps[0].ts):
        reasons.append("incident")
    return reasons


def select(traces: Iterable[Trace], findings: Iterable[Finding], policy: Policy) -> dict[str, Selection]:
    flagged = {f.trace_id for f in findings if f.is_error}
    out = {}
    for trace in traces:
        reasons = _reasons(trace, flagged, policy)
        if reasons:
            out[trace.trace_id] = Selection(trace.trace_id, 1.0, True, tuple(reasons))
            continue
        rate = policy.sampling.base_rate
        judged = unit_hash(trace.trace_id) < rate
        out[trace.trace_id] = Selection(trace.trace_id, rate, judged, ("sampled",) if judged else ())
    return out
