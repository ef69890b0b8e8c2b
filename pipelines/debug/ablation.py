"""`tracelake ablate BAD --against GOOD`: one difference at a time, which one
makes the call fail?

For each difference between a bad call and a known-good sibling
(siblings.py), two variants, each replayed N times at the bad call's
production settings (its own model, temperature and params):

- ``bad``: the bad request with that one difference reversed (the good call's
  value; a retrieved document with no counterpart becomes a neutral passage of
  the same token length);
- ``good``: the good request with that one difference introduced (the bad
  call's value).

plus both requests as recorded (difference 0, the baselines). A failure is the
bad call's own symptom (symptoms.py). The cause is the difference whose
reversal removes the most failures and whose introduction adds the most:
``effect = (bad baseline - bad variant) + (good variant - good baseline)``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from statsmodels.stats.proportion import proportion_confint

from pipelines.debug.siblings import Difference, apply_value
from pipelines.debug.symptoms import failure_test, symptom_of
from pipelines.record.canonical import record_sha256, request_sha256, sha256_hex
from pipelines.replay.bodies import Answer

NEUTRAL = "This passage is a neutral placeholder of the same length and says nothing about the question. "
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Variant:
    applied_to: str  # bad | good
    difference_index: int  # 0: the request as recorded
    difference: str
    block: str
    replacement: str  # baseline | sibling | neutral | bad
    body: dict[str, Any]

    @property
    def request_sha256(self) -> str:
        return request_sha256(self.body)


def neutral_passage(text: str | None) -> str:
    """A passage with no content of the same token length as ``text`` (same characters / 4)."""
    length = max(CHARS_PER_TOKEN, len(text or ""))
    return (NEUTRAL * (length // len(NEUTRAL) + 1))[:length].rstrip() or NEUTRAL.strip()


def _neutral_doc(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {"doc_id": "neutral", "text": neutral_passage(doc.get("text"))}


def variants(
    bad: Mapping[str, Any],
    good: Mapping[str, Any],
    differences: Iterable[Difference],
    *,
    neutral: bool = False,
    bodies: tuple[dict[str, Any], dict[str, Any]] | None = None,
) -> list[Variant]:
    """Both baselines, then for each difference its ``bad`` and ``good`` variants.
    ``neutral``: reverse retrieved documents with a neutral passage, not the sibling's.
    ``bodies``: the (bad, good) requests to start from, as the replay path built them
    (`replay_call.plan_replay`); default: the two calls' stored requests."""
    bad_request, good_request = bodies or (json.loads(bad["request_json"]), json.loads(good["request_json"]))
    out = [
        Variant("bad", 0, "as recorded", "-", "baseline", bad_request),
        Variant("good", 0, "as recorded", "-", "baseline", good_request),
    ]
    for d in differences:
        reverse_with, replacement = d.good, "sibling"
        if d.kind == "document" and d.bad is not None and (neutral or d.good is None):
            reverse_with, replacement = _neutral_doc(d.bad), "neutral"
        out.append(
            Variant("bad", d.number, d.label, d.block, replacement, apply_value(bad_request, d, reverse_with, d.bad))
        )
        out.append(Variant("good", d.number, d.label, d.block, "bad", apply_value(good_request, d, d.bad, d.good)))
    return out


@dataclass(frozen=True)
class Outcome:
    variant: Variant
    samples: int
    failures: int
    ci_low: float
    ci_high: float
    cost_usd: float
    simulated: bool

    @property
    def failure_rate(self) -> float:
        return self.failures / self.samples if self.samples else 0.0


def wilson(failures: int, samples: int) -> tuple[float, float]:
    if samples == 0:
        return 0.0, 1.0
    low, high = proportion_confint(failures, samples, alpha=0.05, method="wilson")
    return float(low), float(high)


def outcomes(
    variants_: list[Variant], answers: Mapping[str, list[Answer]], failed: Callable[[Answer], bool]
) -> list[Outcome]:
    """``answers``: the N answers of each variant, by the variant's request hash."""
    out = []
    for v in variants_:
        got = answers.get(v.request_sha256, [])
        failures = sum(1 for a in got if failed(a))
        low, high = wilson(failures, len(got))
        out.append(
            Outcome(v, len(got), failures, low, high, sum(a.cost_usd for a in got), any(a.simulated for a in got))
        )
    return out


@dataclass(frozen=True)
class Effect:
    difference_index: int
    difference: str
    reversed_in_bad: Outcome
    introduced_in_good: Outcome
    effect: float


def effects(results: list[Outcome]) -> tuple[Outcome, Outcome, list[Effect]]:
    """(bad baseline, good baseline, effects best first)."""
    by = {(o.variant.applied_to, o.variant.difference_index): o for o in results}
    bad0, good0 = by[("bad", 0)], by[("good", 0)]
    out = []
    for (side, index), o in by.items():
        if side != "bad" or index == 0:
            continue
        g = by[("good", index)]
        score = (bad0.failure_rate - o.failure_rate) + (g.failure_rate - good0.failure_rate)
        out.append(Effect(index, o.variant.difference, o, g, score))
    out.sort(key=lambda e: (-e.effect, e.difference_index))
    return bad0, good0, out


def symptom_and_test(bad: Mapping[str, Any]) -> tuple[str, Callable[[Answer], bool]]:
    symptom = symptom_of(bad)
    return symptom, failure_test(bad, symptom)


def ablation_rows(
    bad: Mapping[str, Any],
    good: Mapping[str, Any],
    results: list[Outcome],
    symptom: str,
    *,
    run_id: str,
    now: datetime,
) -> list[dict[str, Any]]:
    rows = []
    for o in results:
        v = o.variant
        row = {
            "ablation_id": sha256_hex(
                f"{bad['call_id']}|{good['call_id']}|{v.applied_to}|{v.difference_index}|{v.request_sha256}|{o.samples}"
            ),
            "bad_call_id": bad["call_id"],
            "good_call_id": good["call_id"],
            "applied_to": v.applied_to,
            "difference_index": v.difference_index,
            "difference": v.difference,
            "block": v.block,
            "replacement": v.replacement,
            "request_sha256": v.request_sha256,
            "symptom": symptom,
            "samples": o.samples,
            "failures": o.failures,
            "failure_rate": o.failure_rate,
            "ci_low": o.ci_low,
            "ci_high": o.ci_high,
            "model": v.body.get("model"),
            "temperature": v.body.get("temperature"),
            "cost_usd": o.cost_usd,
            "simulated": o.simulated,
        }
        row["record_sha256"] = record_sha256(row, ("cost_usd",))
        row["run_id"] = run_id
        row["created_at"] = now
        rows.append(row)
    return rows
