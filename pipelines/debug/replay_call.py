"""`tracelake replay CALL_ID`: one call replayed now, how faithful that is, and
how far the answer moved from the recorded one.

The request is the call's frozen request (``request_json``), built by the
replay core's modes: ``capture`` (as recorded, one sample), ``class_rate``
(as recorded at production settings, N samples) or ``pinned`` (temperature 0).
Fidelity comes from the replay core (``fidelity_of``: the latest `rot_checks`
row and the call's capture list); an ineligible call is not sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipelines.debug.symptoms import customer_language, failure_test, symptom_of
from pipelines.replay.bodies import Answer, pinned, recorded_answer, recorded_request
from pipelines.replay.compare import divergence
from pipelines.replay.fidelity import Fidelity, fidelity_of


@dataclass(frozen=True)
class ReplayPlan:
    fidelity: Fidelity
    mode: str
    body: dict[str, Any] | None


def plan_replay(
    call: Mapping[str, Any],
    rot: Mapping[str, Any] | None,
    *,
    pin: bool,
    samples: int,
    redaction_mode: str | None = None,
) -> ReplayPlan:
    fidelity = fidelity_of(call, rot, redaction_mode=redaction_mode)
    mode = "pinned" if pin else ("capture" if samples == 1 else "class_rate")
    if not fidelity.sendable:
        return ReplayPlan(fidelity, mode, None)
    request = recorded_request(call)
    return ReplayPlan(fidelity, mode, pinned(request) if pin else request)


@dataclass(frozen=True)
class SampleResult:
    index: int
    answer: Answer
    moved: list[str]  # output_text, finish_reason, tool_calls, response_model
    shows_symptom: bool


def compare_samples(call: Mapping[str, Any], answers: list[Answer]) -> tuple[str, list[SampleResult]]:
    """(the bad call's symptom, one result per sample: what moved and whether the symptom came back)."""
    original = recorded_answer(call)
    symptom = symptom_of(call)
    failed = failure_test(call, symptom)
    return symptom, [SampleResult(i, a, divergence(original, a), failed(a)) for i, a in enumerate(answers)]


__all__ = ["ReplayPlan", "SampleResult", "compare_samples", "customer_language", "plan_replay"]
