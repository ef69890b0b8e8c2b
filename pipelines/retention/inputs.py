"""What a day's retention decision reads from the warehouse.

A trace can cross midnight, so a day's decision reads the calls of the day
before and after too (whole days: the tail rules compare a call with its
route's whole day), the `traces` rows of those calls, and the day's earlier
decisions (to carry the sweep's mark over). Only columns the sweep keeps are
read, so deciding again after a sweep gives the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING

import polars as pl

from pipelines.retention.decide import decide
from pipelines.retention.policy import Policy
from pipelines.retention.rules import CALL_COLUMNS, TRACE_COLUMNS

if TYPE_CHECKING:  # the core does not import dagster; the warehouse resource does
    from pipelines.resources.warehouse import Warehouse


@dataclass(frozen=True)
class DayInputs:
    day: date
    calls: pl.DataFrame
    traces: pl.DataFrame
    previous: pl.DataFrame


def read_day(warehouse: Warehouse, day: date) -> DayInputs:
    window = pl.col("occurred_date").is_between(day - timedelta(days=1), day + timedelta(days=1))
    calls = warehouse.read("calls", window, list(CALL_COLUMNS))
    trace_ids = calls["trace_id"].unique().implode()
    # a trace is rolled up on the day it started, at most a day before its calls
    started = pl.col("occurred_date").is_between(day - timedelta(days=2), day + timedelta(days=1))
    traces = warehouse.read("traces", started & pl.col("trace_id").is_in(trace_ids), list(TRACE_COLUMNS))
    previous = warehouse.read("retention", pl.col("occurred_date") == day, ["call_id", "tier", "swept_at"])
    return DayInputs(day, calls, traces, previous)


def decide_window(inputs: DayInputs, policy: Policy, now: datetime) -> pl.DataFrame:
    """Decisions for every call read (the day and its neighbours). Rows of
    ``inputs.day`` are the day's decisions; the neighbours' rows serve only to
    know the tier of traces that cross midnight."""
    return decide(inputs.calls, inputs.traces, policy, now, inputs.previous)


def decide_day(warehouse: Warehouse, day: date, policy: Policy, now: datetime) -> pl.DataFrame:
    """The `retention` rows of the calls that occurred on ``day``."""
    decisions = decide_window(read_day(warehouse, day), policy, now)
    return decisions.filter(pl.col("occurred_date") == day)
