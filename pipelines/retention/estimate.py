"""Unbiased totals from the calls kept in full: the Horvitz-Thompson estimator.

Every call kept in full stands for ``1 / keep_probability`` calls. Traces are
kept independently of each other (a hash of the trace id against the trace's
rate: Poisson sampling of clusters), and all calls of a trace share the
trace's fate, so the variance is a sum over kept traces:

    total    = sum over kept traces t of  y_t / p_t
    variance = sum over kept traces t of  (1 - p_t) / p_t**2 * y_t**2

with ``y_t`` the trace's total (its call count, or the sum of a column) and
``p_t`` its keep probability. Rule-kept traces have ``p_t = 1`` and add no
variance: they are counted, not estimated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from pipelines.retention.decide import FULL


@dataclass(frozen=True)
class Estimate:
    total: float
    variance: float
    z: float

    @property
    def standard_error(self) -> float:
        return math.sqrt(self.variance)

    @property
    def low(self) -> float:
        return self.total - self.z * self.standard_error

    @property
    def high(self) -> float:
        return self.total + self.z * self.standard_error

    def covers(self, truth: float) -> bool:
        return self.low <= truth <= self.high


def horvitz_thompson(decisions: pl.DataFrame, value: str | None = None, z: float = 1.96) -> Estimate:
    """Estimate the total of ``value`` (or, without it, the number of calls)
    over every call in ``decisions`` from its full-kept rows alone.

    ``decisions`` needs trace_id, tier and keep_probability, plus ``value``;
    rows not kept in full are ignored (as they would be once swept).
    """
    # a trace's value: its call count, or the sum of the column over its calls
    y = pl.col(value).fill_null(0.0).cast(pl.Float64).sum() if value else pl.len().cast(pl.Float64)
    traces = (
        decisions.filter(pl.col("tier") == FULL)
        .group_by("trace_id")
        .agg(y.alias("y"), pl.col("keep_probability").max().alias("p"))
    )
    if traces.is_empty():
        return Estimate(0.0, 0.0, z)
    sums = traces.select(
        (pl.col("y") / pl.col("p")).sum().alias("total"),
        ((1.0 - pl.col("p")) / pl.col("p") ** 2 * pl.col("y") ** 2).sum().alias("variance"),
    ).row(0)
    return Estimate(float(sums[0]), float(sums[1]), z)
