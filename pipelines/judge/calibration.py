"""How far to trust each judge prompt version: self-agreement and agreement with people.

- ``self_agreement``: items judged twice (samples 0 and 1), Cohen's kappa between the two answers;
- ``human_feedback``: the judge's "this trace has an error" against the trace's thumbs (down = error).

Kappa is undefined when every answer falls in one category; it is then null,
and the counts say why. Judge errors are left out of agreement and counted.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from datetime import date, datetime
from typing import Any

import numpy as np

from pipelines.judge.llm_judge import JUDGE_ERROR, NO_ERROR, Judgement
from pipelines.record.canonical import record_sha256


def kappa(pairs: list[tuple[str, str]]) -> float | None:
    from statsmodels.stats.inter_rater import cohens_kappa  # loaded when used: every run worker loads this module

    labels = sorted({x for pair in pairs for x in pair})
    if len(labels) < 2:
        return None
    index = {label: i for i, label in enumerate(labels)}
    table = np.zeros((len(labels), len(labels)))
    for a, b in pairs:
        table[index[a], index[b]] += 1
    with np.errstate(invalid="ignore", divide="ignore"):  # perfect agreement: its z statistic divides by 0
        value = float(cohens_kappa(table).kappa)
    return None if math.isnan(value) else value


def calibration_rows(
    judgements: Iterable[Judgement], human: dict[str, bool], day: date, computed_at: datetime
) -> list[dict[str, Any]]:
    """``human``: trace id -> True when a person marked the trace bad (thumbs down), False when good."""
    by_prompt: dict[tuple[str, str, str], list[Judgement]] = defaultdict(list)
    for j in judgements:
        by_prompt[(j.error_class, j.prompt_version, j.prompt_sha256)].append(j)
    rows = []
    for (error_class, version, sha), items in sorted(by_prompt.items()):
        firsts = {j.trace_id: j for j in items if j.sample_index == 0}
        seconds = {j.trace_id: j for j in items if j.sample_index == 1}
        errors = sum(j.label == JUDGE_ERROR for j in items)
        twice = [(firsts[t].label, seconds[t].label) for t in seconds if t in firsts]
        twice_ok = [p for p in twice if JUDGE_ERROR not in p]
        with_human = [
            ("error" if firsts[t].label != NO_ERROR else "ok", "error" if bad else "ok")
            for t, bad in human.items()
            if t in firsts and firsts[t].label != JUDGE_ERROR
        ]
        for check, pairs in (("self_agreement", twice_ok), ("human_feedback", with_human)):
            row = {
                "occurred_date": day,
                "judge": f"llm_judge:{error_class}",
                "prompt_version": version,
                "prompt_sha256": sha,
                "check": check,
                "items": len(pairs),
                "agreements": sum(a == b for a, b in pairs),
                "agreement_rate": (sum(a == b for a, b in pairs) / len(pairs)) if pairs else None,
                "kappa": kappa(pairs),
                "judged": len(firsts),
                "judge_errors": errors,
                "simulated": any(j.simulated for j in items),
                "computed_at": computed_at,
            }
            row["record_sha256"] = record_sha256(row, ("computed_at",))
            rows.append(row)
    return rows
