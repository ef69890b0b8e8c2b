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

# Where the request a replay sends comes from. One path today: the stored request, which
# for a redacted call holds the redaction placeholders (or the encrypted tokens), so its
# replay is approximate. The exact replay of redacted calls (decrypted in memory with the
# replay key, verified against the recorded hash) is another path, chosen here.
STORED_REQUEST = "stored request"


@dataclass(frozen=True)
class ReplayPlan:
    fidelity: Fidelity
    mode: str
    body: dict[str, Any] | None
    path: str = STORED_REQUEST
    path_note: str = ""


def _path_note(fidelity: Fidelity) -> str:
    if "redacted_encrypted" in fidelity.reasons:
        return (
            "the stored request, its encrypted values sent as tokens: this version has no exact-replay path "
            "for redacted calls, so the values the application sent are not in it"
        )
    if "redacted_placeholders" in fidelity.reasons:
        return "the stored request, redaction placeholders included: the values the application sent are not in it"
    return "the stored request, as the application sent it"


def plan_replay(
    call: Mapping[str, Any],
    rot: Mapping[str, Any] | None,
    *,
    pin: bool,
    samples: int,
    redaction_mode: str | None = None,
) -> ReplayPlan:
    """The request a replay of ``call`` sends, how faithful it is and which path built it:
    every one-call replay (`replay CALL_ID`, `ablate`, `investigate`, `promote`) asks here."""
    fidelity = fidelity_of(call, rot, redaction_mode=redaction_mode)
    mode = "pinned" if pin else ("capture" if samples == 1 else "class_rate")
    if not fidelity.sendable:
        return ReplayPlan(fidelity, mode, None, path_note="nothing: the record lacks what a request needs")
    request = recorded_request(call)
    return ReplayPlan(fidelity, mode, pinned(request) if pin else request, STORED_REQUEST, _path_note(fidelity))


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


def sample_row(s: SampleResult, width: int = 160) -> list[str]:
    """One replayed sample as a table row: index, finish, what moved, whether the symptom came back, the answer."""
    moved = ", ".join(s.moved) or ("nothing" if s.answer.ok else "no answer")
    text = (s.answer.text or s.answer.error or "")[:width]
    return [str(s.index), s.answer.finish_reason or s.answer.status, moved, "yes" if s.shows_symptom else "no", text]


__all__ = [
    "STORED_REQUEST",
    "ReplayPlan",
    "SampleResult",
    "compare_samples",
    "customer_language",
    "plan_replay",
    "sample_row",
]
