"""Rates of each class over a day's traces, with intervals, reweighted by the judged-with probability.

Heuristic classes are seen on every trace (p = 1); judge classes on a sample, so
each finding counts 1/p (Horvitz-Thompson). The interval is Wilson's on the
effective count, which is the plain Wilson interval when every p is 1.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ClassRate:
    error_class: str
    traces: int
    findings: int
    estimated: float
    rate: float
    low: float
    high: float


def class_rates(findings: Iterable[Mapping[str, Any]], traces: int, alpha: float = 0.05) -> list[ClassRate]:
    """One rate per class: share of ``traces`` with at least one finding of the class."""
    from statsmodels.stats.proportion import proportion_confint  # loaded when used: every run worker loads this module

    weights: dict[str, dict[str, float]] = defaultdict(dict)
    for f in findings:
        p = float(f.get("judged_with_probability") or 1.0)
        weights[f["error_class"]][f["trace_id"]] = 1.0 / p
    out = []
    for name, per_trace in sorted(weights.items()):
        estimated = min(sum(per_trace.values()), float(traces))
        low, high = proportion_confint(round(estimated), traces, alpha=alpha, method="wilson") if traces else (0, 0)
        out.append(ClassRate(name, traces, len(per_trace), estimated, estimated / traces if traces else 0.0, low, high))
    return out
