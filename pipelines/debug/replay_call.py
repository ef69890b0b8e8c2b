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
from pipelines.replay.fidelity import VERIFIED, Fidelity, fidelity_of
from pipelines.replay.unlock import Unlock


@dataclass(frozen=True)
class ReplayPlan:
    fidelity: Fidelity
    mode: str
    body: dict[str, Any] | None = field(repr=False)
    # a decrypted body: seals what comes back (plaintexts to tokens); verified bytes go out without cache markers
    seal: Callable[[Any], Any] | None = field(default=None, repr=False)
    as_witnessed: bool = False


def plan_replay(
    call: Mapping[str, Any],
    rot: Mapping[str, Any] | None,
    *,
    pin: bool,
    samples: int,
    redaction_mode: str | None = None,
    unlock: Unlock | None = None,
) -> ReplayPlan:
    fidelity = fidelity_of(call, rot, redaction_mode=redaction_mode, unlocked=unlock.outcome if unlock else None)
    mode = "pinned" if pin else ("capture" if samples == 1 else "class_rate")
    if not fidelity.sendable:
        return ReplayPlan(fidelity, mode, None)
    request = recorded_request(unlock.call if unlock is not None and unlock.call is not None else call)
    seal = unlock.seal if unlock is not None else None
    witnessed = unlock is not None and unlock.outcome == VERIFIED and not pin
    return ReplayPlan(fidelity, mode, pinned(request) if pin else request, seal, witnessed)


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
