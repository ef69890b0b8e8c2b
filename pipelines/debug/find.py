"""`tracelake find`: the traces of one user in a time window, newest first."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import polars as pl

from pipelines.debug.tables import Tables

COLUMNS = (
    "started_at",
    "trace_id",
    "service",
    "template_version",
    "model",
    "outcome",
    "feedback",
    "negative_feedback",
    "error_count",
)


def stored_user_ids(user_id: str, to_stored: Callable[[str], str | None] | None = None) -> list[str]:
    """The forms a user id can have in the tables: as given, and as stored
    when ingest pseudonymizes personal ids (``to_stored``: the one function
    mapping a raw id to its stored form, ``pipelines.redact.stored_id`` with
    the operator's keys). The raw form stays for ids that are not personal."""
    stored = to_stored(user_id) if to_stored is not None else None
    return list(dict.fromkeys(i for i in (user_id, stored) if i))


def find_traces(
    warehouse: Tables,
    user_ids: Sequence[str],
    start: datetime,
    end: datetime,
    service: str | None = None,
) -> pl.DataFrame:
    """One row per trace of the user that started in [start, end), newest first,
    with its service, template version(s), model(s), outcome, feedback and error count."""
    days = pl.col("occurred_date").is_between(start.date() - timedelta(days=1), end.date())
    who = pl.col("user_id").is_in(list(user_ids))
    traces = warehouse.scan("traces").filter(
        days & who & (pl.col("started_at") >= start) & (pl.col("started_at") < end)
    )
    if service:
        traces = traces.filter(pl.col("service") == service)
    traces = traces.select(
        "trace_id", "started_at", "service", "models", "outcome", "negative_feedback", "error_count", "occurred_date"
    ).collect()
    if traces.is_empty():
        return pl.DataFrame(schema={c: pl.String for c in COLUMNS})
    calls = (
        warehouse.scan("calls")
        .filter(days & who & pl.col("trace_id").is_in(traces["trace_id"].implode()))
        .select("trace_id", "template_version", "feedback")
        .collect()
    )
    per_trace = calls.group_by("trace_id").agg(
        pl.col("template_version").drop_nulls().unique().sort().str.join(",").alias("template_version"),
        pl.col("feedback")
        .explode()
        .struct.field("value_string")
        .drop_nulls()
        .unique()
        .sort()
        .str.join(",")
        .alias("feedback_values"),
    )
    return (
        traces.join(per_trace, on="trace_id", how="left")
        .with_columns(
            pl.col("models").list.join(",").alias("model"),
            pl.when(pl.col("feedback_values").fill_null("") != "")
            .then(pl.col("feedback_values"))
            .when(pl.col("negative_feedback"))
            .then(pl.lit("negative"))
            .otherwise(pl.lit(""))
            .alias("feedback"),
            pl.col("template_version").fill_null(""),
            pl.col("negative_feedback").fill_null(False),
            pl.col("error_count").fill_null(0),
        )
        .sort("started_at", descending=True)
        .select(COLUMNS)
    )
