"""`tracelake investigate`: from a ticket ("user X, 14:32") to a cause, the debugging protocol as
one pure function per step (no dagster, no I/O; the CLI reads, sends and renders).

1. **find**: the traces in the window; the one with negative feedback, else an error, else a judge
   finding (nearest the time asked among equals), and in it the call that carries the signal;
2. **freeze**: the call's capture list, what it lacks, its rot check, and the fidelity a replay has;
3. **reproduce**: a pinned replay (temperature 0, where the model and API version take it) and the
   class rate at production settings (N samples, Wilson 95% interval);
4. **compare**: the best known-good sibling and the numbered differences (``siblings.py``);
5. **isolate**: each difference reversed in the bad call and introduced into the good one
   (``ablation.py``); whether the ingredient changes the failure odds is a Cochran-Mantel-Haenszel
   test stratified by the call it was tried in (bad or good), Holm-adjusted over the differences;
6. **conclude**: one sentence a person can act on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from pipelines.debug.ablation import Effect, Outcome, effects, wilson
from pipelines.debug.replay_call import SampleResult
from pipelines.debug.siblings import Difference
from pipelines.record.schema import CAPTURE_ITEMS

ALPHA = 0.05
SIGNALS = ("negative feedback", "error", "judge finding")

# what each capture-list item is, for a person reading the freeze step
CAPTURE_MEANING = {
    "input": "the request as sent (system prompt and messages)",
    "prompt_version": "the template id and version it was rendered from",
    "model_params": "the model and its parameters",
    "tool_results": "the results of the tools it called",
    "intermediate_observations": "what the agent saw between steps",
    "output_finish_reason": "the output and its finish reason",
    "seed": "a sampling seed (the Messages API takes none: never needed)",
    "timestamp_response_id": "the time and the provider's response id",
}


# -- 1. find --------------------------------------------------------------------------------------


def signals(trace: Mapping[str, Any]) -> list[str]:
    """What marks a trace (a `find_traces` row plus ``findings``) as the one a ticket is about."""
    out = []
    if trace.get("negative_feedback"):
        out.append("negative feedback")
    if (trace.get("error_count") or 0) > 0 or trace.get("outcome") == "error":
        out.append("error")
    if (trace.get("findings") or 0) > 0:
        out.append("judge finding")
    return out


def _rank(signal_list: list[str]) -> int:
    return min((SIGNALS.index(s) for s in signal_list), default=len(SIGNALS))


def pick_trace(traces: Sequence[Mapping[str, Any]], at: datetime | None) -> tuple[Mapping[str, Any], str]:
    """The trace a ticket is about, and why: negative feedback first, then an error, then a judge
    finding; among equals the one that started nearest ``at``."""
    if not traces:
        raise ValueError("no traces to pick from")

    def distance(t: Mapping[str, Any]) -> float:
        return abs((t["started_at"] - at).total_seconds()) if at is not None else 0.0

    ranked = sorted(traces, key=lambda t: (_rank(signals(t)), distance(t), str(t["trace_id"])))
    best = ranked[0]
    found = signals(best)
    near = f" nearest {at:%H:%M}" if at is not None else ""
    if len(traces) == 1:
        why = "the only trace in the window"
        return best, why + (f": it has {' and '.join(found)}" if found else ": it has no feedback, error or finding")
    if not found:
        return best, (
            f"none of the {len(traces)} traces has negative feedback, an error or a judge finding: took the one{near}"
        )
    top = found[0]
    same = sum(1 for t in traces if _rank(signals(t)) == _rank(found))
    others = f"{same} of {len(traces)} traces have it; took the one{near}" if same > 1 else "the others have none"
    return best, f"it has {' and '.join(found)} ({top} ranks first; {others})"


def pick_call(record: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The call of a trace (`tables.read_trace`) the ticket is about, and why: the one with negative
    feedback, else the one that errored, else the one a judge finding names, else the last one."""
    calls = sorted(record.get("calls") or [], key=lambda c: (c.get("occurred_at") is None, c.get("occurred_at")))
    if not calls:
        raise ValueError("the trace has no model calls")
    for call in calls:
        if call.get("negative_feedback"):
            return call, "it got the negative feedback"
    for call in calls:
        if call.get("status") == "error" or call.get("error_type"):
            return call, f"it failed ({call.get('error_type') or 'error'})"
    by_step = {s.get("step_index"): s.get("call_id") for s in record.get("spans") or [] if s.get("call_id")}
    errors = [f for f in record.get("semantic_errors") or [] if f.get("is_error") is not False]
    named = {f.get("call_id") for f in errors} | {by_step.get(f.get("affected_step")) for f in errors}
    named |= {by_step.get(v.get("step_index")) for v in record.get("violations") or []}
    for call in calls:
        if call["call_id"] in named:
            return call, "a judge finding names its step"
    if len(calls) == 1:
        return calls[0], "the trace's only call"
    return calls[-1], f"the trace's last of {len(calls)} calls (none has feedback, an error or a finding)"


# -- 2. freeze ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaptureItem:
    item: str
    present: bool
    meaning: str


def capture_list(call: Mapping[str, Any]) -> list[CaptureItem]:
    missing = set(call.get("capture_missing") or [])
    if not call.get("request_json"):
        missing.add("input")
    return [CaptureItem(i, i not in missing, CAPTURE_MEANING[i]) for i in CAPTURE_ITEMS]


def rot_lines(rot: Mapping[str, Any] | None, when: str) -> list[str]:
    """The rot check in words: its verdict, what rotted and where (``detail`` names blocks and store
    keys, never a value)."""
    if rot is None:
        return [f"rot check ({when}): none"]
    status = rot.get("status") or "?"
    components = ", ".join(rot.get("components") or [])
    head = f"rot check ({when}): {status}" + (f" ({components})" if components else "")
    if rot.get("missing"):
        head += f"; could not check: {', '.join(rot['missing'])}"
    return [head, *[f"  {line}" for line in rot.get("detail") or []]]


def explain(
    reason: str,
    *,
    call: Mapping[str, Any],
    rot: Mapping[str, Any] | None,
    substituted: tuple[str, str] | None,
    dropped: Mapping[str, str],
    api_version: str,
) -> str:
    """One fidelity reason (``pipelines/replay/fidelity.py``) in words, naming what it is about."""
    detail = "; ".join(rot.get("detail") or []) if rot else ""
    template = " ".join(str(v) for v in (call.get("template_id"), call.get("template_version")) if v) or "?"
    words = {
        "template_changed": f"template {template} changed in the store since the call: today it renders another "
        "system prompt (the replay sends the recorded one)",
        "template_missing": f"template {template} is no longer in the store",
        "document_changed": "a retrieved document changed in the index since the call",
        "document_missing": "a retrieved document is gone from today's index",
        "model_alias_moved": "the model alias the call used resolves to another snapshot today",
        "params_changed": "the route's parameters changed in the params store",
        "tools_changed": "the tool definitions changed",
        "template_impure": "the template prints per-call values (a date, a score): it never renders twice alike",
        "redacted_placeholders": "the stored request holds redaction placeholders (<PERSON_1>, ...): the values "
        "the application sent are not in what the replay sends",
        "redacted_encrypted": "the stored request holds encrypted values sent as tokens: this version has no "
        "exact replay of redacted calls",
        "request_not_hash_witnessed": "the stored request does not hash to the recorded rendered_request_sha256",
        "truncated_capture": "the capture was truncated",
        "not_rot_checked": "the call's ingredients could not be re-rendered now, so nothing says the stored "
        "request is the one sent",
        "model_substituted": (
            f"recorded on {substituted[0]}, which the API has retired: replayed on {substituted[1]}, its substitute"
            if substituted
            else "replayed on a retired model's substitute"
        ),
        "parameters_dropped": f"API version {api_version} refused "
        + ", ".join(f"{p} ({why})" for p, why in sorted(dropped.items()))
        + ": removed before sending",
    }
    text = words.get(reason) or reason.replace("_", " ")
    if reason.startswith(("template_", "document_", "model_alias", "params_", "tools_")) and detail:
        text += f" [{detail}]"
    return f"{reason}: {text}"


# -- 3. reproduce ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rate:
    failures: int
    samples: int
    low: float
    high: float

    @classmethod
    def of(cls, failures: int, samples: int) -> Rate:
        return cls(failures, samples, *wilson(failures, samples))

    @classmethod
    def of_outcome(cls, outcome: Outcome) -> Rate:
        return cls(outcome.failures, outcome.samples, outcome.ci_low, outcome.ci_high)

    def text(self) -> str:
        return f"{self.failures}/{self.samples} [{self.low:.2f}\u2013{self.high:.2f}]"


@dataclass(frozen=True)
class Reproduction:
    symptom: str
    samples: list[SampleResult]  # at production settings
    rate: Rate
    settings: str  # what "production settings" meant on the wire
    pinned: SampleResult | None  # None: not sent (pinned_note says why)
    pinned_note: str

    @property
    def reproduces(self) -> bool:
        return self.rate.failures > 0


def sampling_note(body: Mapping[str, Any], dropped: Mapping[str, str], api_version: str) -> str:
    """What a request's sampling parameters were on the wire: sent, or refused and removed."""
    asked = {k: body[k] for k in ("temperature", "top_p", "top_k") if k in body}
    if not asked:
        return "no sampling parameters recorded: the API's defaults"
    sent = {k: v for k, v in asked.items() if k not in dropped}
    refused = {k: v for k, v in asked.items() if k in dropped}
    parts = []
    if sent:
        parts.append(", ".join(f"{k} {v}" for k, v in sent.items()) + " sent")
    if refused:
        reasons = ", ".join(sorted({dropped[k] for k in refused}))
        parts.append(
            ", ".join(f"{k} {v}" for k, v in refused.items())
            + f" asked but not sent (API version {api_version} refuses it: {reasons}), so the API's default"
        )
    return "; ".join(parts)


# -- 5. isolate -----------------------------------------------------------------------------------


def cmh_p_value(bad0: Outcome, reversed_: Outcome, good0: Outcome, introduced: Outcome) -> float:
    """Does the bad call's value of an ingredient change the odds of failing? A Cochran-Mantel-Haenszel
    test (continuity-corrected) over two strata: the bad call (its value vs the good one's) and the good
    call (the bad value introduced vs its own). 1.0 when no stratum has both outcomes."""
    from statsmodels.stats.contingency_tables import StratifiedTable

    tables = []
    for with_bad_value, with_good_value in ((bad0, reversed_), (introduced, good0)):
        table = np.array(
            [
                [with_bad_value.failures, with_bad_value.samples - with_bad_value.failures],
                [with_good_value.failures, with_good_value.samples - with_good_value.failures],
            ]
        )
        failed, passed = table.sum(axis=0)
        if failed and passed and table.sum(axis=1).all():
            tables.append(table)
    if not tables:
        return 1.0
    return float(StratifiedTable(tables).test_null_odds(correction=True).pvalue)


@dataclass(frozen=True)
class Tested:
    effect: Effect
    difference: Difference
    p_value: float
    p_adjusted: float  # Holm over the differences

    @property
    def significant(self) -> bool:
        return self.effect.effect > 0 and self.p_adjusted < ALPHA


@dataclass(frozen=True)
class Isolation:
    bad0: Outcome
    good0: Outcome
    tested: list[Tested]  # largest effect first

    @property
    def cause(self) -> Tested | None:
        return self.tested[0] if self.tested and self.tested[0].significant else None


def isolate(results: list[Outcome], differences: Sequence[Difference]) -> Isolation:
    from statsmodels.stats.multitest import multipletests

    bad0, good0, ranked = effects(results)
    by_number = {d.number: d for d in differences}
    raw = [cmh_p_value(bad0, e.reversed_in_bad, good0, e.introduced_in_good) for e in ranked]
    adjusted = list(multipletests(raw, method="holm")[1]) if raw else []
    tested = [
        Tested(e, by_number[e.difference_index], p, float(a)) for e, p, a in zip(ranked, raw, adjusted, strict=True)
    ]
    return Isolation(bad0, good0, tested)


# -- 6. conclude ----------------------------------------------------------------------------------


def cause_name(d: Difference) -> str:
    if d.kind == "document":
        return f"the retrieved block `{(d.bad or d.good or {}).get('doc_id')}`"
    if d.kind == "variable":
        return f"the template variable `{d.key}`"
    if d.kind == "param":
        return f"the parameter `{d.key}`"
    if d.kind == "message":
        return f"message {d.key}"
    return {"model": "the model", "tools": "the tool definitions", "system": "the system prompt"}.get(d.kind, d.kind)


def _replaced(t: Tested) -> str:
    how = "replaced by a neutral passage" if t.effect.reversed_in_bad.variant.replacement == "neutral" else "replaced"
    return f"when {how}" if t.difference.kind == "document" else "when reversed"


def _counts(a: Outcome, b: Outcome) -> str:
    return f"{a.failures}/{a.samples} \u2192 {b.failures}/{b.samples}"


def likely_reasons(
    call: Mapping[str, Any],
    *,
    rot: Mapping[str, Any] | None,
    fidelity_reasons: Sequence[str],
    substituted: tuple[str, str] | None,
    dropped: Mapping[str, str],
) -> list[str]:
    """Why a failure that does not come back may have gone, most specific first."""
    out = []
    if call.get("status") == "error" or call.get("error_type"):
        out.append(f"the recorded error ({call.get('error_type') or 'error'}) was transient")
    if substituted:
        out.append(f"provider drift: recorded on {substituted[0]} (retired), replayed on {substituted[1]}")
    if dropped:
        out.append(f"the API no longer takes {', '.join(sorted(dropped))}: sampled at its defaults")
    if "redacted_placeholders" in fidelity_reasons or "redacted_encrypted" in fidelity_reasons:
        out.append("redaction: a failure that depended on the redacted values cannot come back from the stored request")
    if rot and rot.get("status") == "rotted":
        out.append("a rotted pointer: " + "; ".join(rot.get("detail") or rot.get("components") or []))
    if not out:
        out.append("provider drift (the same request on the same model no longer fails) or a transient failure")
    return out


def symptom_words(symptom: str) -> str:
    return {
        "errored": "the call fails",
        "truncated": "the answer is cut at max tokens",
        "language_mismatch": "the answer is not in the customer's language",
        "reproduces": "same finish, tools and language as the bad answer",
    }.get(symptom, symptom)


def conclude(
    reproduction: Reproduction,
    isolation: Isolation | None,
    *,
    sibling: str | None,
    likely: Sequence[str],
    approximate: Sequence[str] = (),
) -> str:
    """The investigation in one paragraph: does it reproduce, how often, and what causes it."""
    rate = reproduction.rate.text()
    caveat = f" (the replay was approximate: {', '.join(approximate)})" if approximate else ""
    if not reproduction.reproduces:
        return f"does not reproduce ({rate}): likely " + "; or ".join(likely) + caveat
    head = f"reproduces {rate}"
    if sibling is None:
        return f"{head}; no known-good sibling to compare with, so no cause isolated{caveat}"
    if isolation is None or not isolation.tested:
        return f"{head}; the best sibling's request does not differ: the failure is the model's own variation{caveat}"
    bad0, good0 = isolation.bad0, isolation.good0
    if good0.samples and bad0.samples and good0.failures / good0.samples >= bad0.failures / bad0.samples:
        return (
            f"{head}; but the known-good sibling shows the symptom ({symptom_words(reproduction.symptom)}) as often "
            f"({good0.failures}/{good0.samples} as recorded): the test does not tell this call from good ones, "
            f"so no cause can be isolated; compare the outputs by eye{caveat}"
        )
    top = isolation.tested[0]
    e = top.effect
    rates = (
        f"{_counts(isolation.bad0, e.reversed_in_bad)} {_replaced(top)}; "
        f"{_counts(isolation.good0, e.introduced_in_good)} when introduced into the good sibling; "
        f"p={top.p_adjusted:.3f}"
    )
    if top.significant:
        return f"{head}; {cause_name(top.difference)} causes it ({rates}){caveat}"
    return (
        f"{head}; no single difference from the best sibling is significant (largest: #{e.difference_index} "
        f"{cause_name(top.difference)}: {rates}, Holm over {len(isolation.tested)}); more samples (--n 30) "
        f"may separate them{caveat}"
    )
