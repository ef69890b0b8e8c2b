"""A finding: one semantic error (or a refusal that was expected) tied to the step that caused it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipelines.judge.timeline import Step, Trace
from pipelines.record.canonical import record_sha256, sha256_hex

# classes that are not errors: stored, but not counted in error rates
NOT_ERRORS = frozenset({"policy_refusal"})
EVIDENCE_CHARS = 240


@dataclass(frozen=True)
class Finding:
    trace_id: str
    error_class: str
    detector: str
    detector_version: str
    affected_step: int
    confidence: float
    evidence: str
    # the earlier step the error grew from (an empty or failed tool), when it is not the affected one
    cause_step: int | None = None
    session_id: str | None = None
    call_id: str | None = None
    event_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_error(self) -> bool:
        return self.error_class not in NOT_ERRORS


def quote(text: Any, limit: int = 80) -> str:
    """A short quote of step content for evidence, on one line."""
    flat = " ".join(str(text if text is not None else "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def finding(
    trace: Trace,
    step: Step,
    error_class: str,
    detector: str,
    version: str,
    evidence: str,
    *,
    confidence: float = 1.0,
    cause: Step | None = None,
    **extra: Any,
) -> Finding:
    return Finding(
        trace_id=trace.trace_id,
        session_id=trace.session_id,
        error_class=error_class,
        detector=detector,
        detector_version=version,
        affected_step=step.step_index,
        cause_step=cause.step_index if cause is not None else None,
        call_id=step.call_id,
        event_key=step.span_key,
        confidence=confidence,
        evidence=evidence[:EVIDENCE_CHARS],
        extra=extra,
    )


def finding_id(f: Finding) -> str:
    return sha256_hex(f"{f.trace_id}|{f.error_class}|{f.detector}|{f.detector_version}|{f.affected_step}")


def finding_rows(
    findings: list[Finding], occurred: dict[str, Any], probabilities: dict[str, float]
) -> list[dict[str, Any]]:
    """`semantic_errors` rows. ``occurred``: trace id -> its day; ``probabilities``: trace id ->
    the probability its trace was judged with (1.0 for heuristic findings: every trace runs them)."""
    rows = []
    for f in findings:
        row = {
            "finding_id": finding_id(f),
            "trace_id": f.trace_id,
            "session_id": f.session_id,
            "call_id": f.call_id,
            "event_key": f.event_key,
            "occurred_date": occurred[f.trace_id],
            "error_class": f.error_class,
            "is_error": f.is_error,
            "detector": f.detector,
            "detector_version": f.detector_version,
            "confidence": float(f.confidence),
            "evidence": f.evidence,
            "affected_step": f.affected_step,
            "cause_step": f.cause_step,
            "judged_with_probability": probabilities.get(f.trace_id, 1.0),
            "judge_prompt_sha256": f.extra.get("prompt_sha256"),
            "request_key": f.extra.get("request_key"),
            "simulated": bool(f.extra.get("simulated", False)),
        }
        row["record_sha256"] = record_sha256(row, ())
        rows.append(row)
    return rows
