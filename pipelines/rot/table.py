"""`rot_checks` rows, the latest-status view, and rot rates per route.

``rot_checks`` keeps one row per call per check run, so the history of a call
(verified last week, rotted since the index rebuild) stays queryable. Most
questions want the latest verdict per call: ``latest_status`` (polars) and
``LATEST_STATUS_SQL`` (polars SQL / DuckDB / Spark / Trino) give it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import polars as pl

from pipelines.record.canonical import record_sha256
from pipelines.rot.check import ROTTED, VERIFIED, RotCheck
from pipelines.rot.ingredients import Ingredients

# The latest check of every call. Needs a `rot_checks` table (a registered
# frame or the Delta table) in scope.
LATEST_STATUS_SQL = """
SELECT *
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY call_id ORDER BY checked_at DESC) AS check_rank
    FROM rot_checks
) AS ranked
WHERE check_rank = 1
"""

# Rotted calls by component, latest verdict per call.
ROTTED_BY_COMPONENT_SQL = """
WITH latest AS (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY call_id ORDER BY checked_at DESC) AS check_rank
    FROM rot_checks
)
SELECT component, service, COUNT(*) AS calls
FROM (SELECT UNNEST(components) AS component, service FROM latest WHERE check_rank = 1 AND status = 'rotted')
GROUP BY component, service
ORDER BY calls DESC
"""


def rot_rows(
    checks: Iterable[RotCheck] | pl.DataFrame, ingredients: Ingredients, checked_at: datetime, run_id: str
) -> list[dict[str, Any]]:
    """`rot_checks` rows for one run, from ``Checker.check_all`` or ``grouped.check_frame``."""
    if isinstance(checks, pl.DataFrame):
        checks = (SimpleNamespace(**row) for row in checks.iter_rows(named=True))
    rows = []
    for c in checks:
        row = {
            "call_id": c.call_id,
            "checked_at": checked_at,
            "checked_date": checked_at.date(),
            "trace_id": c.trace_id,
            "service": c.service,
            "occurred_date": c.occurred_date,
            "status": c.status,
            "components": c.components,
            "missing": c.missing,
            "rotted_blocks": c.rotted_blocks,
            "basis": c.basis,
            "replay_fidelity": c.replay_fidelity,
            "recorded_sha256": c.recorded_sha256,
            "rerendered_sha256": c.rerendered_sha256,
            "template_id": c.template_id,
            "template_version": c.template_version,
            "template_sha256": c.template_sha256,
            "index_snapshot": c.index_snapshot,
            "model_alias": c.model_alias,
            "model_snapshot": c.model_snapshot,
            "models_config_sha256": ingredients.models_sha256,
            "params_config_sha256": ingredients.params_sha256,
            "detail": c.detail,
        }
        # run ids and check times are bookkeeping: a retried run writes the same verdicts
        row["record_sha256"] = record_sha256(row, ("checked_at", "checked_date"))
        row["run_id"] = run_id
        rows.append(row)
    return rows


def latest_status(rot_checks: pl.LazyFrame) -> pl.LazyFrame:
    """The latest check of every call."""
    return rot_checks.sort("checked_at").group_by("call_id").last()


def rot_rates(latest: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """Rot rate per route and day of the calls: rotted / (rotted + verified).
    Impure and unverifiable calls have no verdict on their pointers, so they
    count in ``checked`` but not in the rate."""
    frame = latest.lazy() if isinstance(latest, pl.DataFrame) else latest
    return (
        frame.group_by("service", "occurred_date")
        .agg(
            pl.len().alias("checked"),
            (pl.col("status") == ROTTED).sum().alias("rotted"),
            (pl.col("status") == VERIFIED).sum().alias("verified"),
        )
        .with_columns(
            pl.when(pl.col("rotted") + pl.col("verified") > 0)
            .then(pl.col("rotted") / (pl.col("rotted") + pl.col("verified")))
            .alias("rot_rate")
        )
        .sort("service", "occurred_date")
        .collect()
    )


def rate_jumps(
    rates: pl.DataFrame,
    day: date,
    *,
    history_days: int = 7,
    min_calls: int = 20,
    min_increase: float = 0.10,
    factor: float = 2.0,
) -> pl.DataFrame:
    """Routes whose rot rate on ``day`` jumped against the ``history_days`` before:
    at least ``min_increase`` above the pooled rate of those days and at least
    ``factor`` times it, over at least ``min_calls`` calls with a verdict. A route
    with no history is not judged (there is nothing to jump from)."""
    decided = pl.col("rotted") + pl.col("verified")
    history = (
        rates.filter(pl.col("occurred_date").is_between(day - timedelta(days=history_days), day - timedelta(days=1)))
        .group_by("service")
        .agg(
            (pl.col("rotted").sum() / decided.sum()).alias("baseline_rate"),
            decided.sum().alias("baseline_calls"),
            pl.len().alias("history_days"),
        )
        .filter(pl.col("baseline_calls") > 0)
    )
    today = rates.filter((pl.col("occurred_date") == day) & (decided >= min_calls))
    return (
        today.join(history, on="service", how="inner")
        .filter(
            (pl.col("rot_rate") >= pl.col("baseline_rate") + min_increase)
            & (pl.col("rot_rate") >= pl.col("baseline_rate") * factor)
        )
        .select("service", "rot_rate", "baseline_rate", "rotted", "verified", "baseline_calls", "history_days")
        .sort("service")
    )
