"""What the judge stage's warning checks look at: class rates over threshold, sessions that ran
past a step, sessions over a cost (plain polars over `semantic_errors` and `agent_events`)."""

from __future__ import annotations

import polars as pl

from pipelines.judge.policy import Policy
from pipelines.judge.rates import ClassRate, class_rates

WORK = ["llm.call", "tool.invoke", "agent.think", "state.mutate"]


def rates(findings: pl.DataFrame, traces: int) -> list[ClassRate]:
    return class_rates(findings.filter(pl.col("is_error")).to_dicts(), traces)


def rates_over(rates: list[ClassRate], policy: Policy) -> list[ClassRate]:
    """Classes whose interval's lower bound is above their threshold."""
    limits = policy.class_rate_thresholds
    return [r for r in rates if r.error_class in limits and r.low > limits[r.error_class]]


def deep_sessions(events: pl.DataFrame, policy: Policy) -> pl.DataFrame:
    """Sessions with a work step (not session.start/end) past the policy's step."""
    step = policy.thresholds.deep_step
    return (
        events.filter(pl.col("event_type").is_in(WORK))
        .group_by("session_id", "trace_id")
        .agg(pl.col("step_index").max().alias("last_step"))
        .filter(pl.col("last_step") > step)
        .sort("last_step", "session_id", descending=[True, False])
    )


def costly_sessions(events: pl.DataFrame, policy: Policy) -> pl.DataFrame:
    return (
        events.filter(pl.col("event_type") == "llm.call")
        .group_by("session_id", "trace_id")
        .agg(pl.col("cost_usd").sum().alias("cost_usd"), pl.len().alias("calls"))
        .filter(pl.col("cost_usd") > policy.thresholds.session_cost_usd)
        .sort("cost_usd", descending=True)
    )
