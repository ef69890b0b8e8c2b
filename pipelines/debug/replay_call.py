"""`tracelake replay CALL_ID`: one call replayed now, how faithful that is, and
how far the answer moved from the recorded one.

The request is the call's frozen request (``request_json``), built by the
replay core's modes: ``capture`` (as recorded, one sample), ``class_rate``
(as recorded at production settings, N samples) or ``pinned`` (temperature 0).
Fidelity comes from the replay core (``fidelity_of``: the latest `rot_checks`
row and the call's capture list); an ineligible call is not sent. An
encrypt-mode call is sent decrypted when the replay key is configured
(``pipelines.replay.unlock``): ``exact`` when its decrypted request hashes to
the recorded hash; its answers come back sealed (plaintexts as tokens).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipelines.debug.symptoms import customer_language, failure_test, symptom_of
from pipelines.replay.bodies import Answer, pinned, recorded_answer, recorded_request
from pipelines.replay.compare import divergence
from pipelines.replay.fidelity import KEY_ABSENT, VERIFIED, Fidelity, fidelity_of
from pipelines.replay.unlock import Unlock

# Where the request a replay sends comes from: the stored request, which for a redacted call
# holds the redaction placeholders (or the encrypted tokens), so its replay is approximate;
# or, for an encrypt-mode call with the replay key configured, the request decrypted in
# memory and verified against the recorded hash (pipelines.replay.unlock).
STORED_REQUEST = "stored request"
DECRYPTED_REQUEST = "decrypted request"


@dataclass(frozen=True)
class ReplayPlan:
    fidelity: Fidelity
    mode: str
    body: dict[str, Any] | None = field(repr=False)
    path: str = STORED_REQUEST
    path_note: str = ""
    # a decrypted body: seals what comes back (plaintexts to tokens); verified bytes go out without cache markers
    seal: Callable[[Any], Any] | None = field(default=None, repr=False)
    as_witnessed: bool = False


def _path_note(fidelity: Fidelity) -> str:
    if KEY_ABSENT in fidelity.reasons:
        return "the stored request, its encrypted values sent as tokens: the replay key is not configured"
    if "redacted_encrypted" in fidelity.reasons:
        return "the stored request, its encrypted values sent as tokens: the values the application sent are not in it"
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
    unlock: Unlock | None = None,
) -> ReplayPlan:
    """The request a replay of ``call`` sends, how faithful it is and which path built it:
    every one-call replay (`replay CALL_ID`, `ablate`, `investigate`, `promote`) asks here."""
    fidelity = fidelity_of(call, rot, redaction_mode=redaction_mode, unlocked=unlock.outcome if unlock else None)
    mode = "pinned" if pin else ("capture" if samples == 1 else "class_rate")
    if not fidelity.sendable:
        return ReplayPlan(fidelity, mode, None, path_note="nothing: the record lacks what a request needs")
    if unlock is not None and unlock.call is not None:
        request = recorded_request(unlock.call)
        verified = unlock.outcome == VERIFIED
        note = "the request decrypted in memory with the replay key, " + (
            "its bytes verified against the recorded hash" if verified else f"not verified: {unlock.outcome}"
        )
        body = pinned(request) if pin else request
        return ReplayPlan(fidelity, mode, body, DECRYPTED_REQUEST, note, unlock.seal, verified and not pin)
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
