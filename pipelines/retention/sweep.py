"""The sweep: past the hot window, calls in the ``ingredients`` tier lose their
full text (see ``strip`` for exactly what goes and what stays).

For each day past the hot window that is not settled yet, the sweep decides
again from the current data, right before stripping: a call flagged since its
first decision (a late thumbs-down merged onto ``calls.feedback``, a check that
added a flag) is kept. It then rewrites the calls and spans that still hold
text, marks the day's decisions with ``swept_at``, and finally compacts the
touched partitions and vacuums, so the bytes leave the disk, not just the
table. A day is settled when every call has a decision, every
``ingredients`` decision is marked, and no call was ingested since (a changed
source object, re-ingested, brings text back); a second run finds nothing to
do and commits nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING

import polars as pl

from pipelines.retention.decide import FULL, INGREDIENTS, row_sha256
from pipelines.retention.inputs import decide_window, read_day
from pipelines.retention.policy import Policy
from pipelines.retention.strip import has_full_text, strip_calls, strip_spans

if TYPE_CHECKING:
    from pipelines.resources.warehouse import Warehouse


@dataclass
class SweepReport:
    days: list[date] = field(default_factory=list)
    calls_stripped: int = 0
    spans_stripped: int = 0
    # decided "ingredients" earlier, kept in full now (flagged since)
    kept_late: int = 0
    files_removed: int = 0
    bytes_before: dict[str, int] = field(default_factory=dict)
    bytes_after: dict[str, int] = field(default_factory=dict)


def first_hot_day(today: date, policy: Policy) -> date:
    """Calls from this day on are in the hot window; earlier days are swept."""
    return today - timedelta(days=policy.hot_window_days)


def days_to_sweep(warehouse: Warehouse, before: date) -> list[date]:
    """Days before ``before`` that are not settled: a call has no decision yet,
    an ``ingredients`` decision is not marked swept, or a call was ingested
    after the day was last swept (a changed source object, re-ingested, brings
    its text back)."""
    past = pl.col("occurred_date") < before
    calls = (
        warehouse.scan("calls")
        .filter(past)
        .group_by("occurred_date")
        .agg(pl.len().alias("calls"), pl.col("ingested_at").max().alias("last_ingested"))
        .collect()
    )
    decided = (
        warehouse.scan("retention")
        .filter(past)
        .group_by("occurred_date")
        .agg(
            pl.len().alias("decided"),
            ((pl.col("tier") == INGREDIENTS) & pl.col("swept_at").is_null()).sum().alias("unswept"),
            pl.col("swept_at").max().alias("last_swept"),
        )
        .collect()
    )
    days = calls.join(decided, on="occurred_date", how="left").filter(
        (pl.col("decided").fill_null(0) < pl.col("calls"))
        | (pl.col("unswept").fill_null(0) > 0)
        | (pl.col("last_ingested") > pl.col("last_swept")).fill_null(False)
    )
    return sorted(days["occurred_date"].to_list())


def table_bytes(warehouse: Warehouse, name: str) -> int:
    """Bytes of the files the table's current version reads."""
    table = warehouse.table(name)
    if table is None:
        return 0
    sizes = table.get_add_actions(flatten=True).column("size_bytes").to_pylist()
    return int(sum(sizes))


def sweep_day(warehouse: Warehouse, day: date, policy: Policy, now: datetime) -> SweepReport:
    """Decide ``day`` again, strip what is in the ingredients tier, mark it swept."""
    inputs = read_day(warehouse, day)
    decisions = decide_window(inputs, policy, now)
    today = decisions.filter(pl.col("occurred_date") == day)
    report = SweepReport(days=[day])
    earlier = inputs.previous.filter(pl.col("tier") == INGREDIENTS)["call_id"].implode()
    report.kept_late = today.filter((pl.col("tier") == FULL) & pl.col("call_id").is_in(earlier)).height

    ingredient_ids = today.filter(pl.col("tier") == INGREDIENTS)["call_id"].implode()
    on_day = pl.col("occurred_date") == day
    calls = warehouse.read("calls", on_day & pl.col("call_id").is_in(ingredient_ids)).filter(has_full_text())
    report.calls_stripped = warehouse.rewrite("calls", strip_calls(calls)).updated

    # a trace's spans lose their text only when every call of the trace is in the ingredients tier
    traces = decisions.group_by("trace_id").agg((pl.col("tier") == INGREDIENTS).all().alias("swept"))
    swept_traces = traces.filter("swept")["trace_id"].implode()
    spans = warehouse.read("spans", on_day & pl.col("trace_id").is_in(swept_traces))
    changed = strip_spans(spans, policy.sweep.keep_span_attributes)
    report.spans_stripped = warehouse.rewrite("spans", changed).updated

    # mark last: a run that dies before this point does the day again
    marked = today.with_columns(
        pl.when(pl.col("tier") == INGREDIENTS)
        .then(pl.lit(now).cast(pl.Datetime("us", "UTC")))
        .otherwise(pl.col("swept_at"))
        .alias("swept_at")
    )
    warehouse.merge("retention", marked.with_columns(row_sha256(marked)), partitions=[day])
    return report


def sweep(
    warehouse: Warehouse,
    policy: Policy,
    today: date,
    now: datetime,
    progress: Callable[[str], None] | None = None,
) -> SweepReport:
    """Sweep every unsettled day before the hot window, then free the bytes."""
    report = SweepReport(bytes_before={t: table_bytes(warehouse, t) for t in ("calls", "spans", "retention")})
    for day in days_to_sweep(warehouse, first_hot_day(today, policy)):
        one = sweep_day(warehouse, day, policy, now)
        report.days.append(day)
        report.calls_stripped += one.calls_stripped
        report.spans_stripped += one.spans_stripped
        report.kept_late += one.kept_late
        if progress:
            progress(f"{day}: {one.calls_stripped} calls and {one.spans_stripped} spans stripped")
    # every swept day rewrote its retention rows; calls and spans only where text was left
    rewritten = [t for t, n in (("calls", report.calls_stripped), ("spans", report.spans_stripped)) if n]
    for table in [*rewritten, "retention"] if report.days else []:
        warehouse.compact(table, report.days)
        report.files_removed += warehouse.vacuum(table, orphan_grace_hours=policy.sweep.orphan_grace_hours)
    report.bytes_after = {t: table_bytes(warehouse, t) for t in ("calls", "spans", "retention")}
    return report
