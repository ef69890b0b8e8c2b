"""Rot stage: re-render every call of a day from today's ingredient stores and
record whether its request still reproduces (`rot_checks`), and warn when a
route's rot rate jumps.
"""

from collections import Counter
from datetime import UTC, datetime, timedelta

import dagster as dg
import polars as pl

from assets.reporting import merge_metadata, preview
from pipelines.automation import after_inputs, after_nightly_load
from pipelines.partitions import daily, day_of
from pipelines.redact.keys import KeyRing
from pipelines.resources.stores import DocumentStore, ModelAliasStore, ParamsStore, TemplateStore, load_ingredients
from pipelines.resources.warehouse import Warehouse
from pipelines.rot.check import CALL_COLUMNS, STATUSES, Checker
from pipelines.rot.grouped import check_frame
from pipelines.rot.redaction import RedactionView, audits_from_rows
from pipelines.rot.table import latest_status, rate_jumps, rot_rates, rot_rows

HISTORY_DAYS = 7


def _checked_at(context: dg.AssetExecutionContext) -> datetime:
    """The run's start: a retried step of the same run writes the same rows."""
    record = context.instance.get_run_record_by_id(context.run.run_id)
    when = record.create_timestamp if record is not None else datetime.now(UTC)
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _redaction(warehouse: Warehouse, day) -> RedactionView:
    """How the day's calls were redacted, and the keys to compare keyed hashes
    (and decrypt encrypt-mode values) with."""
    audit = warehouse.read(
        "redaction_audit",
        (pl.col("occurred_date") == day) & (pl.col("source_table") == "calls"),
        ["call_id", "mode", "fields", "hash_key_id", "replacements"],
    )
    # TRACELAKE_HASH_KEY / TRACELAKE_REDACTION_KEY(S), as redaction reads them
    return RedactionView(audits_from_rows(audit.iter_rows(named=True)), keys=KeyRing.from_env())


def _markdown(frame: pl.DataFrame) -> dg.MetadataValue:
    return preview(frame.to_dicts(), frame.columns, limit=50)


@dg.asset(
    deps=["calls"],
    partitions_def=daily,
    kinds={"delta"},
    group_name="rot",
    pool="warehouse",
    automation_condition=after_nightly_load(),
    description="One row per call per check run: does the recorded request still re-render from today's "
    "ingredient stores, and if not, which pointer rotted.",
)
def rot_checks(
    context: dg.AssetExecutionContext,
    warehouse: Warehouse,
    template_store: TemplateStore,
    document_store: DocumentStore,
    model_alias_store: ModelAliasStore,
    params_store: ParamsStore,
) -> dg.MaterializeResult:
    day = day_of(context)
    checked_at = _checked_at(context)
    calls = warehouse.read("calls", pl.col("occurred_date") == day, list(CALL_COLUMNS))
    versions = calls.select("template_id", "template_version").drop_nulls().unique().iter_rows()
    ingredients = load_ingredients(template_store, document_store, model_alias_store, params_store, versions)
    checker = Checker(ingredients, checked_at, redaction=_redaction(warehouse, day))
    checks = check_frame(checker, calls)
    rows = rot_rows(checks, ingredients, checked_at, context.run.run_id)
    result = warehouse.merge("rot_checks", rows, partitions=[checked_at.date()])

    statuses = Counter(r["status"] for r in rows)
    bases = Counter(r["basis"] for r in rows)
    components = Counter(c for r in rows for c in r["components"])
    context.log.info(
        f"{day}: {len(rows)} calls checked against index {ingredients.index_snapshot}: "
        + ", ".join(f"{statuses[s]} {s}" for s in STATUSES)
    )
    verdicts = pl.DataFrame(
        {k: [r[k] for r in rows] for k in ("service", "occurred_date", "status")},
        schema={"service": pl.String, "occurred_date": pl.Date, "status": pl.String},
    )
    rates = rot_rates(verdicts) if rows else None
    return dg.MaterializeResult(
        metadata={
            **merge_metadata(result, warehouse, pl.col("checked_at") == checked_at),
            "checked_at": checked_at.isoformat(),
            "calls_checked": len(rows),
            **{f"calls_{s}": statuses[s] for s in STATUSES},
            "components": dg.MetadataValue.json(dict(components.most_common())),
            "basis": dg.MetadataValue.json(dict(bases.most_common())),
            "index_snapshot": ingredients.index_snapshot,
            "rot_rate_by_route": _markdown(rates.select("service", "checked", "rotted", "verified", "rot_rate"))
            if rates is not None
            else dg.MetadataValue.md("_no calls_"),
            "preview": preview(
                [r for r in rows if r["status"] != "verified"] or rows,
                ["service", "status", "components", "missing", "basis", "replay_fidelity"],
            ),
        }
    )


@dg.asset_check(
    asset=rot_checks,
    partitions_def=daily,
    automation_condition=after_inputs(),
    description=f"Warns when a route's rot rate on the day jumps against the {HISTORY_DAYS} days before.",
)
def rot_rate_jump(context: dg.AssetCheckExecutionContext, warehouse: Warehouse) -> dg.AssetCheckResult:
    day = day_of(context)
    window = pl.col("occurred_date").is_between(day - timedelta(days=HISTORY_DAYS), day)
    checks = (
        warehouse.scan("rot_checks")
        .filter(window)
        .select("call_id", "checked_at", "service", "occurred_date", "status")
    )
    rates = rot_rates(latest_status(checks))
    jumps = rate_jumps(rates, day, history_days=HISTORY_DAYS)
    today = rates.filter(pl.col("occurred_date") == day).select("service", "checked", "rotted", "verified", "rot_rate")
    return dg.AssetCheckResult(
        passed=jumps.is_empty(),
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            "no route's rot rate jumped"
            if jumps.is_empty()
            else "rot rate jumped on " + ", ".join(jumps["service"].to_list()) + ": look for a store change"
        ),
        metadata={
            "routes_jumped": jumps.height,
            "jumps": _markdown(jumps) if not jumps.is_empty() else dg.MetadataValue.md("_none_"),
            "rot_rate_by_route": _markdown(today) if not today.is_empty() else dg.MetadataValue.md("_no checks_"),
        },
    )
