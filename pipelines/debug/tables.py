"""Reading what a debugging command needs from the warehouse, as little as possible.

A trace is looked up in `traces` first (small) to learn its day, so that
`calls` and `spans` are read from that day's partitions (and the days either
side, for traces crossing midnight) rather than scanned whole.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any, Protocol

import polars as pl

from pipelines.ingest.traces import negative_feedback


class Tables(Protocol):
    def table(self, name: str) -> Any: ...
    def scan(self, name: str) -> pl.LazyFrame: ...


def optional_scan(warehouse: Tables, name: str) -> pl.LazyFrame | None:
    """A lazy frame over a table another stage writes (judge's findings), or
    None when that stage has not run here: debugging works without it."""
    if warehouse.table(name) is None:
        return None
    return warehouse.scan(name)


def days_around(day: date) -> list[date]:
    return [day - timedelta(days=1), day, day + timedelta(days=1)]


def trace_day(warehouse: Tables, trace_id: str) -> date | None:
    found = warehouse.scan("traces").filter(pl.col("trace_id") == trace_id).select("occurred_date").collect()
    if found.height:
        return found["occurred_date"][0]
    found = warehouse.scan("calls").filter(pl.col("trace_id") == trace_id).select("occurred_date").collect()
    return found["occurred_date"][0] if found.height else None


def read_trace(warehouse: Tables, trace_id: str) -> dict[str, Any] | None:
    """Everything `show` needs about one trace: its rollup, calls, spans and
    the judge's findings for it (empty lists when the judge has not run)."""
    day = trace_day(warehouse, trace_id)
    if day is None:
        return None
    near = pl.col("occurred_date").is_in(days_around(day)) & (pl.col("trace_id") == trace_id)
    rollup = warehouse.scan("traces").filter(near).collect().to_dicts()
    # negative_feedback: the `traces` rollup's own rule, per call (`investigate` picks the call by it)
    calls = (
        warehouse.scan("calls")
        .filter(near)
        .with_columns(negative_feedback(pl.col("feedback")).alias("negative_feedback"))
        .collect()
        .to_dicts()
    )
    spans = warehouse.scan("spans").filter(near).collect().to_dicts()
    return {
        "trace": rollup[0] if rollup else None,
        "calls": calls,
        "spans": spans,
        "violations": _findings(warehouse, "state_violations", trace_id),
        "semantic_errors": _findings(warehouse, "semantic_errors", trace_id),
    }


def _findings(warehouse: Tables, name: str, trace_id: str) -> list[dict[str, Any]]:
    frame = optional_scan(warehouse, name)
    if frame is None or "trace_id" not in frame.collect_schema().names():
        return []
    return frame.filter(pl.col("trace_id") == trace_id).collect().to_dicts()


def read_call(warehouse: Tables, call_id: str) -> dict[str, Any] | None:
    rows = warehouse.scan("calls").filter(pl.col("call_id") == call_id).collect().to_dicts()
    return rows[0] if rows else None


def latest_rot_check(warehouse: Tables, call_id: str) -> dict[str, Any] | None:
    frame = optional_scan(warehouse, "rot_checks")
    if frame is None:
        return None
    rows = frame.filter(pl.col("call_id") == call_id).sort("checked_at").collect().to_dicts()
    return rows[-1] if rows else None


def findings_by_trace(warehouse: Tables, trace_ids: list[str]) -> dict[str, int]:
    """How many judge findings (`semantic_errors` marked errors, `state_violations`) each trace has;
    traces without any are left out, and so is everything when the judge stage has not run."""
    counts: dict[str, int] = {}
    for name in ("semantic_errors", "state_violations"):
        frame = optional_scan(warehouse, name)
        if frame is None or "trace_id" not in frame.collect_schema().names():
            continue
        frame = frame.filter(pl.col("trace_id").is_in(trace_ids))
        if "is_error" in frame.collect_schema().names():
            frame = frame.filter(pl.col("is_error").fill_null(True))
        for trace_id, n in frame.group_by("trace_id").len().collect().iter_rows():
            counts[trace_id] = counts.get(trace_id, 0) + n
    return counts
