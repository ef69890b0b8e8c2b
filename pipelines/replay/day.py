"""One candidate's replay of one day: sample, plan the requests of every mode,
send them through ``send`` (the LLM resource, in one batch per round), compare,
and return the ``replays`` rows.

``send(list[LLMRequest]) -> {key: Answer}`` is the only way out; a request whose
content address was answered before is answered from the ledger by the resource,
so a re-run sends nothing and produces the same rows.

Every body goes out on a model the API serves (``DayInputs.serve``): a call
recorded on a retired model is replayed on its substitute, and so is its paired
baseline, so a diff keeps a same-model control. Such rows say
``substituted_from``, are ``approximate`` with ``model_substituted``, and where
the comparison is with the recorded answer (capture, pinned, class_rate, state)
``old_source`` is ``recorded_baseline``: the old side is another model's
answer, whose noise is not a control's.

An ``encrypt``-mode call is decrypted in memory when the replay key is configured
(``DayInputs.unlocker``, ``pipelines.replay.unlock``): its request, and a diff's
candidate side rendered from its decrypted ingredients, are sent as the
application sent them, ``exact`` when the decrypted request hashes to the recorded
hash; answers come back sealed (plaintexts as tokens) before any row holds them.
A call whose tokens do not decrypt sends nothing (``decryption_failed``). State
replays send the stored tokens (``redacted_encrypted``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from pipelines.llm.request import LLMRequest
from pipelines.record.canonical import canonical_json, sha256_hex
from pipelines.replay import bodies as b
from pipelines.replay.bodies import BASELINE, Answer, replay_request
from pipelines.replay.candidates import Candidate
from pipelines.replay.compare import BAD_FINISH, compare, divergence, reproduces
from pipelines.replay.fidelity import APPROXIMATE, VERIFIED, Fidelity, fidelity_of
from pipelines.replay.judging import SETTLED, Judge
from pipelines.replay.sampling import Sampled, stratified_sample
from pipelines.replay.state import RecordedTools, next_body
from pipelines.replay.unlock import Unlocker

# the calls columns a replay reads
CALL_COLUMNS = (
    "call_id",
    "trace_id",
    "session_id",
    "service",
    "occurred_at",
    "segment",
    "template_id",
    "template_version",
    "template_variables_json",
    "request_json",
    "rendered_request_sha256",
    "request_sha256",
    "request_hash_matches",
    "retrieval",
    "messages",
    "tool_definitions",
    "tool_executions",
    "context_complete",
    "truncated",
    "capture_missing",
    "flags",
    "output_text",
    "output_messages",
    "finish_reason",
    "response_model",
    "usage",
    "feedback",
    "guardrail_hit",
)
Send = Callable[[list[LLMRequest]], Mapping[str, Answer]]
# a body -> (the body on a model the API serves, the retired model it was recorded on or None)
Serve = Callable[[dict[str, Any]], tuple[dict[str, Any], str | None]]
NO_ANSWER = Answer(status="not_sent")
# columns of `replays` that differ between runs of the same work: not part of the row's hash
VOLATILE = ("run_id",)
RECORDED_BASELINE = "recorded_baseline"
MODEL_SUBSTITUTED = "model_substituted"
PARAMETERS_DROPPED = "parameters_dropped"


def as_recorded(body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``Serve`` that changes nothing (every model served)."""
    return body, None


@dataclass
class DayInputs:
    """What a candidate's day replays from."""

    candidate: Candidate
    day: date
    calls: list[dict[str, Any]]
    rot: dict[str, dict[str, Any]] = field(default_factory=dict)  # call_id -> latest rot_checks row
    redaction_modes: dict[str, str] = field(default_factory=dict)  # call_id -> redaction mode
    template_source: str | None = None  # the candidate's template, resolved from the store or inline
    # diff replays' comparison (pipelines.replay.judging); None: deterministic signals only
    judge: Judge | None = None
    # every outgoing body through it (pipelines.llm.lifecycle.serve: a retired model -> its substitute)
    serve: Serve = as_recorded
    # decrypts encrypt-mode calls with the replay key (none: their tokens are sent, replay_key_absent)
    unlocker: Unlocker = field(default_factory=lambda: Unlocker(None))


@dataclass(frozen=True)
class Planned:
    """One replay of a single-call mode, before anything is sent."""

    sampled: Sampled
    mode: str
    index: int
    fidelity: Fidelity
    sent: LLMRequest | None
    baseline: LLMRequest | None = None
    substituted_from: str | None = None
    # why nothing was sent although the call was chosen (a token that does not decrypt)
    refused: str | None = None


@dataclass(frozen=True)
class SessionStart:
    """A sampled agent session a state replay resumes, before anything is sent."""

    sampled: Sampled
    fidelity: Fidelity
    session: list[dict[str, Any]]
    body: dict[str, Any] | None  # the first step's body on a served model (None: not sendable)
    substituted_from: str | None = None


def _is_failure(call: Mapping[str, Any]) -> bool:
    """A call class-rate replays: it ended badly or a person said it was bad."""
    feedback_down = any((f.get("value_string") or "") in ("down", "thumbs_down") for f in call.get("feedback") or [])
    return call.get("finish_reason") in BAD_FINISH or feedback_down or bool(call.get("guardrail_hit"))


def _row(
    inputs: DayInputs,
    sampled: Sampled,
    mode: str,
    sample_index: int,
    fidelity: Fidelity,
    sent: LLMRequest | None,
    new: Answer,
    old: Answer,
    old_source: str,
    *,
    baseline: LLMRequest | None = None,
    extra_cost: Answer | None = None,
    step: int | None = None,
    charged: set[str],
    substituted_from: str | None = None,
) -> dict[str, Any]:
    call = sampled.call
    candidate = inputs.candidate
    fidelity = _with_what_was_sent(fidelity, substituted_from, new, old if baseline else None)
    if substituted_from and old_source == "recorded":
        old_source = RECORDED_BASELINE
    # a request two calls share (the same rendered body) is billed once: on the first row that used it
    cost_parts = [a for a in (new, extra_cost) if a is not None and a.request_key not in charged]
    charged.update(a.request_key for a in cost_parts if a.request_key)
    row = {
        "replay_id": sha256_hex(f"{call['call_id']}|{candidate.id}|{mode}|{sample_index}"),
        "candidate": candidate.id,
        "candidate_revision": candidate.revision,
        "day": inputs.day,
        "call_id": call["call_id"],
        "trace_id": call.get("trace_id"),
        "session_id": call.get("session_id"),
        "service": call.get("service"),
        "mode": mode,
        "sample_index": sample_index,
        "step": step,
        "fidelity": fidelity.level,
        "fidelity_reasons": list(fidelity.reasons),
        "segment": sampled.segment,
        "segment_key": sampled.segment_key,
        "language": sampled.segment.get("language"),
        "inclusion_probability": sampled.inclusion_probability,
        "recorded_request_sha256": call.get("rendered_request_sha256"),
        "request_sha256": sent.request_sha256 if sent else None,
        "request_key": sent.key if sent else None,
        "baseline_request_key": baseline.key if baseline else None,
        "old_source": old_source,
        "old_output": old.text,
        "new_output": new.text,
        "old_finish_reason": old.finish_reason,
        "new_finish_reason": new.finish_reason,
        "old_tool_calls_json": canonical_json([list(t) for t in old.tool_calls]),
        "new_tool_calls_json": canonical_json([list(t) for t in new.tool_calls]),
        "old_model": old.model,
        "new_model": new.model,
        "divergence": [],
        "status": new.status,
        "error": new.error,
        "input_tokens": sum(a.input_tokens for a in cost_parts),
        "output_tokens": sum(a.output_tokens for a in cost_parts),
        "cache_read_input_tokens": sum(a.cache_read_input_tokens for a in cost_parts),
        "cache_write_input_tokens": sum(a.cache_write_input_tokens for a in cost_parts),
        "cost_usd": round(sum(a.cost_usd for a in cost_parts), 8),
        "judge_cost_usd": 0.0,
        "verdict": None,
        "decided_by": None,
        "reproduced": None,
        "class_rate": None,
        "class_rate_low": None,
        "class_rate_high": None,
        "stop_reason": None,
        "simulated": any(a.simulated for a in cost_parts),
        "substituted_from": substituted_from,
    }
    return row


def _with_what_was_sent(
    fidelity: Fidelity, substituted_from: str | None, new: Answer, baseline: Answer | None
) -> Fidelity:
    """A sent replay's fidelity once it is known what went out: another model, parameters removed."""
    if not fidelity.sendable:
        return fidelity
    reasons = list(fidelity.reasons)
    if substituted_from:
        reasons.append(MODEL_SUBSTITUTED)
    if new.dropped or (baseline is not None and baseline.dropped):
        reasons.append(PARAMETERS_DROPPED)
    if len(reasons) == len(fidelity.reasons):
        return fidelity
    return Fidelity(APPROXIMATE, tuple(dict.fromkeys(reasons)))


def _seal(rows: list[dict[str, Any]], run_id: str | None) -> list[dict[str, Any]]:
    for row in rows:
        stable = {k: v for k, v in row.items() if k not in VOLATILE}
        row["record_sha256"] = sha256_hex(json.dumps(stable, sort_keys=True, default=str, ensure_ascii=False))
        row["run_id"] = run_id
    return rows


def latest_rot(checks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """call_id -> its latest ``rot_checks`` row."""
    latest: dict[str, dict[str, Any]] = {}
    for row in checks:
        held = latest.get(row["call_id"])
        if held is None or row["checked_at"] > held["checked_at"]:
            latest[row["call_id"]] = row
    return latest


def plan_sample(inputs: DayInputs) -> tuple[list[Sampled], list[list[dict[str, Any]]]]:
    """(calls the single-call modes replay, agent sessions state replay starts in)."""
    candidate = inputs.candidate
    salt = f"{candidate.id}|{inputs.day.isoformat()}"
    applicable = [c for c in inputs.calls if candidate.applies(c)]
    sessions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    singles = []
    for call in applicable:
        if "state" in candidate.modes and call.get("session_id") and call.get("tool_definitions"):
            sessions[call["session_id"]].append(call)
        else:
            singles.append(call)
    ordered = [sorted(s, key=lambda c: (c.get("occurred_at") is None, c.get("occurred_at"))) for s in sessions.values()]
    return stratified_sample(singles, candidate.sample.per_stratum, salt), ordered


def plan_day(inputs: DayInputs) -> tuple[list[Planned], list[SessionStart]]:
    """Every single-call replay and every state session start of a candidate's day, nothing sent."""
    candidate = inputs.candidate
    singles, sessions = plan_sample(inputs)
    plans: list[Planned] = []
    for sampled in singles:
        call = sampled.call
        rot = inputs.rot.get(call["call_id"])
        mode_of_redaction = inputs.redaction_modes.get(call["call_id"])
        unlock = inputs.unlocker.unlock(call, mode_of_redaction)
        # the call as the application sent it (decrypted, in memory) where the key allows
        source = unlock.call if unlock is not None and unlock.call is not None else call
        seal = unlock.seal if unlock is not None else None
        # a verified decrypted request goes out as the witnessed bytes: no prompt-cache markers added
        as_witnessed = {"cache_prefix": False} if unlock is not None and unlock.outcome == VERIFIED else {}
        for mode in candidate.modes:
            if mode == "state":
                continue
            rerenders = mode == "diff" and inputs.template_source is not None
            fidelity = fidelity_of(
                call,
                rot,
                rerenders_template=rerenders,
                redaction_mode=mode_of_redaction,
                unlocked=unlock.outcome if unlock is not None else None,
            )
            if not fidelity.sendable:
                plans.append(Planned(sampled, mode, 0, fidelity, None, refused=unlock.error if unlock else None))
                continue
            recorded, substituted = inputs.serve(b.recorded_request(source))
            common = {
                "candidate": candidate.id,
                "call_id": call["call_id"],
                "substituted_from": substituted,
                "seal": seal,
            }
            if mode == "capture":
                plans.append(
                    Planned(
                        sampled,
                        mode,
                        0,
                        fidelity,
                        replay_request(recorded, mode, **common, **as_witnessed),
                        None,
                        substituted,
                    )
                )
            elif mode == "pinned":
                request = replay_request(b.pinned(recorded), mode, **common)
                plans.append(Planned(sampled, mode, 0, fidelity, request, None, substituted))
            elif mode == "class_rate" and _is_failure(call):
                for i in range(candidate.sample.class_rate_samples):
                    request = replay_request(recorded, mode, i, **common, **as_witnessed)
                    plans.append(Planned(sampled, mode, i, fidelity, request, None, substituted))
            elif mode == "diff":
                # the candidate's side moves only when it keeps the recorded (retired) model; the baseline always
                as_asked = b.with_candidate(source, b.recorded_request(source), candidate, inputs.template_source)
                body, moved = inputs.serve(as_asked)
                baseline = replay_request(
                    recorded, BASELINE, call_id=call["call_id"], substituted_from=substituted, seal=seal, **as_witnessed
                )
                sent = replay_request(
                    body, mode, candidate=candidate.id, call_id=call["call_id"], substituted_from=moved, seal=seal
                )
                plans.append(Planned(sampled, mode, 0, fidelity, sent, baseline, substituted or moved))
    return plans, _session_starts(inputs, sessions)


def outgoing(plans: Sequence[Planned]) -> list[LLMRequest]:
    """The distinct requests of the single-call replays (candidate sides and baselines)."""
    found = [o for plan in plans for o in (plan.sent, plan.baseline) if o is not None]
    return list({o.key: o for o in found}.values())


def replay_day(inputs: DayInputs, send: Send, *, run_id: str | None = None) -> list[dict[str, Any]]:
    """Every ``replays`` row of a candidate's day (see the module docstring)."""
    from statsmodels.stats.proportion import proportion_confint  # loaded when used: every run worker loads this module

    plans, starts = plan_day(inputs)
    rows: list[dict[str, Any]] = []
    requests = outgoing(plans)
    answers = send(requests) if requests else {}
    diffs: list[tuple[dict[str, Any], dict[str, Any], Answer, Answer]] = []
    charged: set[str] = set()  # request keys whose cost a row already carries
    class_samples: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for plan in plans:
        sampled, mode, index, fidelity, sent, baseline = (
            plan.sampled,
            plan.mode,
            plan.index,
            plan.fidelity,
            plan.sent,
            plan.baseline,
        )
        call = sampled.call
        language = sampled.segment.get("language")
        original = b.recorded_answer(call)
        new = answers.get(sent.key, NO_ANSWER) if sent else NO_ANSWER
        if plan.refused:
            new = Answer(status="not_sent", error=plan.refused)
        diff = mode == "diff"
        old = (answers.get(baseline.key, NO_ANSWER) if baseline else NO_ANSWER) if diff else original
        row = _row(
            inputs,
            sampled,
            mode,
            index,
            fidelity,
            sent,
            new,
            old,
            BASELINE if diff else "recorded",
            baseline=baseline,
            extra_cost=old if baseline else None,
            charged=charged,
            substituted_from=plan.substituted_from,
        )
        if sent is not None:
            row["verdict"], row["decided_by"] = compare(old, new, language)
            if diff and row["decided_by"] not in SETTLED:
                diffs.append((row, call, old, new))
            if not diff:
                row["divergence"] = divergence(original, new)
        if mode == "class_rate":
            row["reproduced"] = reproduces(original, new, language)
            class_samples[call["call_id"]].append(row)
        rows.append(row)
    if inputs.judge is not None and inputs.candidate.comparison == "pairwise_judge" and diffs:
        judged = inputs.judge([(call, old, new) for _, call, old, new in diffs])
        for (row, *_), verdict in zip(diffs, judged, strict=True):
            row["verdict"], row["decided_by"] = verdict.verdict, verdict.decided_by
            row["judge_cost_usd"] = verdict.cost_usd
            row["simulated"] = row["simulated"] or verdict.simulated
    for samples in class_samples.values():
        known = [r for r in samples if r["reproduced"] is not None]
        if known:
            hits = sum(bool(r["reproduced"]) for r in known)
            low, high = proportion_confint(hits, len(known), alpha=0.05, method="wilson")
            for r in samples:
                r["class_rate"], r["class_rate_low"], r["class_rate_high"] = hits / len(known), float(low), float(high)
    rows.extend(_state_rows(inputs, starts, send, charged))
    return _seal(rows, run_id)


def _session_starts(inputs: DayInputs, sessions: Sequence[list[dict[str, Any]]]) -> list[SessionStart]:
    """The sampled sessions a state replay resumes, with the body of its first step."""
    candidate = inputs.candidate
    if not sessions:
        return []
    starts = {s[min(candidate.sample.state_from_step, len(s) - 1)]["call_id"]: s for s in sessions}
    sampled = stratified_sample(
        [s[min(candidate.sample.state_from_step, len(s) - 1)] for s in sessions],
        candidate.sample.per_stratum,
        f"{candidate.id}|{inputs.day.isoformat()}|state",
    )
    out = []
    for item in sampled:
        call, session = item.call, starts[item.call["call_id"]]
        fidelity = fidelity_of(
            call,
            inputs.rot.get(call["call_id"]),
            rerenders_template=inputs.template_source is not None,
            redaction_mode=inputs.redaction_modes.get(call["call_id"]),
        )
        if not fidelity.sendable:
            out.append(SessionStart(item, fidelity, session, None))
            continue
        # compared with the recorded final answer: substituted only when the candidate keeps the retired model
        body, moved = inputs.serve(b.with_candidate(call, b.recorded_request(call), candidate, inputs.template_source))
        out.append(SessionStart(item, fidelity, session, body, moved))
    return out


def _state_rows(
    inputs: DayInputs, starts: Sequence[SessionStart], send: Send, charged: set[str]
) -> list[dict[str, Any]]:
    """Resume each sampled session from step N and let the candidate continue (see ``state``)."""
    candidate = inputs.candidate
    rows: list[dict[str, Any]] = []
    live: list[tuple[SessionStart, RecordedTools, dict[str, Any], Answer]] = []
    for start in starts:
        final = b.recorded_answer(start.session[-1])
        if start.body is None:
            rows.append(
                _row(
                    inputs,
                    start.sampled,
                    "state",
                    0,
                    start.fidelity,
                    None,
                    NO_ANSWER,
                    final,
                    "recorded",
                    step=0,
                    charged=charged,
                )
            )
            continue
        live.append((start, RecordedTools(start.session), start.body, final))
    for step in range(candidate.sample.step_limit):
        if not live:
            break
        out = {
            id(entry): replay_request(
                entry[2], "state", step, candidate.id, entry[0].sampled.call["call_id"], entry[0].substituted_from
            )
            for entry in live
        }
        answers = send(list({o.key: o for o in out.values()}.values()))
        still = []
        for entry in live:
            start, tools, body, final = entry
            item = start.sampled
            sent = out[id(entry)]
            answer = answers.get(sent.key, NO_ANSWER)
            row = _row(
                inputs,
                item,
                "state",
                step,
                start.fidelity,
                sent,
                answer,
                final,
                "recorded",
                step=step,
                charged=charged,
                substituted_from=start.substituted_from,
            )
            following, why = next_body(body, answer, tools) if answer.ok else (None, "error")
            if following is not None and step + 1 == candidate.sample.step_limit:
                following, why = None, "step_limit"
            if following is None:
                row["stop_reason"] = why
                row["verdict"], row["decided_by"] = compare(final, answer, item.segment.get("language"))
                if why and why.startswith("no_recorded_result"):
                    row["verdict"], row["decided_by"] = "inconclusive", why
            else:
                still.append((start, tools, following, final))
            rows.append(row)
        live = still
    return rows
