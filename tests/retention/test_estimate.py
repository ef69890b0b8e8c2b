"""Reweighting: totals estimated from the calls kept in full, with 1/keep_probability
weights, land within their confidence interval of the true totals."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from pipelines.resources.warehouse import Warehouse
from pipelines.retention.decide import decide
from pipelines.retention.estimate import horvitz_thompson
from pipelines.retention.policy import load_policy
from pipelines.retention.rules import CALL_COLUMNS, TRACE_COLUMNS

NOW = datetime(2026, 11, 30, tzinfo=UTC)
README = Path(__file__).parents[2] / "pipelines" / "retention" / "README.md"


@pytest.fixture(scope="module")
def inputs(demo) -> tuple[pl.DataFrame, pl.DataFrame]:
    golden = Warehouse(uri=str(demo.root / "warehouse"))
    return golden.read("calls", columns=list(CALL_COLUMNS)), golden.read("traces", columns=list(TRACE_COLUMNS))


def test_the_weighted_count_lands_within_its_interval_of_the_true_count(inputs):
    calls, traces = inputs
    decisions = decide(calls, traces, load_policy(), NOW)
    assert load_policy().base_rate == 0.10
    estimate = horvitz_thompson(decisions)
    full = decisions.filter(pl.col("tier") == "full").height
    sampled = decisions.filter(pl.col("reasons").list.contains("sampled")).height
    assert sampled > 30 and full < decisions.height  # a real sample, not everything
    assert estimate.standard_error > 0
    assert estimate.total != full  # the weights do something
    assert estimate.covers(decisions.height), (estimate.low, decisions.height, estimate.high)


def test_a_weighted_sum_of_a_column_covers_its_true_sum(inputs):
    calls, traces = inputs
    decisions = decide(calls, traces, load_policy(), NOW)
    tokens = calls.select("call_id", pl.col("usage").struct.field("output_tokens").alias("output_tokens"))
    joined = decisions.join(tokens, on="call_id")
    estimate = horvitz_thompson(joined, "output_tokens")
    assert estimate.covers(tokens["output_tokens"].fill_null(0).sum())


def test_the_interval_covers_the_truth_at_its_nominal_rate_across_samples(inputs):
    """The variance estimate is right (not just the point estimate): over 200
    independent samples (salts), the 95% interval covers the truth about 95% of
    the time, and the estimates average out to the truth."""
    calls, traces = inputs
    policy = load_policy()
    truth = calls.height
    estimates = [
        horvitz_thompson(decide(calls, traces, policy.model_copy(update={"sampling_salt": f"s{i}"}), NOW))
        for i in range(200)
    ]
    coverage = sum(e.covers(truth) for e in estimates) / len(estimates)
    assert 0.90 <= coverage <= 0.99, coverage
    mean = sum(e.total for e in estimates) / len(estimates)
    assert abs(mean - truth) / truth < 0.015, (mean, truth)


def test_the_readme_queries_give_the_same_estimates(inputs, demo):
    """The SQL in pipelines/retention/README.md, run as written with polars SQL."""
    calls, traces = inputs
    decisions = decide(calls, traces, load_policy(), NOW)
    per_route, refunds = re.findall(r"```sql\n(.*?)```", README.read_text(), re.S)

    result = pl.SQLContext(retention=decisions.lazy()).execute(per_route).collect()
    estimate = horvitz_thompson(decisions)
    assert result["estimated_calls"].sum() == pytest.approx(estimate.total)
    assert result["variance"].sum() == pytest.approx(estimate.variance)

    texts = Warehouse(uri=str(demo.root / "warehouse")).read("calls", columns=["call_id", "output_text"])
    result = pl.SQLContext(retention=decisions.lazy(), calls=texts.lazy()).execute(refunds).collect()
    flagged = decisions.join(texts, on="call_id").with_columns(
        pl.col("output_text").str.to_lowercase().str.contains("refund").fill_null(False).cast(pl.Float64).alias("y")
    )
    expected = horvitz_thompson(flagged, "y")
    assert expected.total > 0
    assert result["estimated_refund_answers"].sum() == pytest.approx(expected.total)
