"""Judge stage: the agent log (`agent_events`), semantic errors found by heuristics and the
sampled LLM judge (`semantic_errors`, `judge_calibration`), the state validator
(`state_violations`), warning checks, data-quality checks on the agent log, and a
sensor that posts each warning to a Slack-compatible webhook.
"""

import warnings
from collections import Counter
from datetime import UTC, date, datetime, timedelta

import dagster as dg
import polars as pl

from assets.quality import quality_check
from assets.reporting import merge_metadata, preview
from pipelines.automation import after_inputs, after_nightly_load
from pipelines.judge import day as judge_day
from pipelines.judge import watch
from pipelines.judge.alerts import Alert, slack_payload
from pipelines.judge.events import event_rows
from pipelines.judge.rates import ClassRate
from pipelines.judge.timeline import Trace, build_traces
from pipelines.partitions import daily, day_of
from pipelines.resources.judge import AlertWebhook, JudgePolicy
from pipelines.resources.llm import LLM
from pipelines.resources.warehouse import Warehouse

warnings.filterwarnings(
    "ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning
)

GROUP = "judge"
ALERT_CHECKS = ("semantic_error_rate", "deep_sessions", "session_cost")


def _around(day: date) -> pl.Expr:
    return pl.col("occurred_date").is_between(day - timedelta(days=1), day + timedelta(days=1))


def _traces_of(warehouse: Warehouse, day: date) -> list[Trace]:
    """The traces that started on the day (the `traces` rollup says which), with their steps
    from the spans and calls around it (a session may cross midnight)."""
    ids = set(warehouse.read("traces", pl.col("occurred_date") == day, ["trace_id"])["trace_id"].to_list())
    if not ids:
        return []
    spans = warehouse.read("spans", _around(day) & pl.col("trace_id").is_in(list(ids)))
    calls = warehouse.read("calls", _around(day) & pl.col("trace_id").is_in(list(ids)))
    return judge_day.day_traces(spans.to_dicts(), calls.to_dicts(), ids)


def _rates_md(rates: list[ClassRate]) -> dg.MetadataValue:
    rows = [
        {
            "class": r.error_class,
            "traces": r.traces,
            "findings": r.findings,
            "estimated": round(r.estimated, 1),
            "rate": r.rate,
            "low": r.low,
            "high": r.high,
        }
        for r in rates
    ]
    return preview(rows, ["class", "traces", "findings", "estimated", "rate", "low", "high"], limit=50)


@dg.asset(
    deps=["spans", "calls"],
    partitions_def=daily,
    kinds={"delta"},
    group_name=GROUP,
    pool="warehouse",
    automation_condition=after_nightly_load(),
    description="One row per event of every trace (any source format) in the structured agent-log shape.",
)
def agent_events(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    day = day_of(context)
    spans = warehouse.read("spans", _around(day))
    calls = warehouse.read("calls", _around(day))
    rows = [r for r in event_rows(build_traces(spans.to_dicts(), calls.to_dicts())) if r["occurred_date"] == day]
    result = warehouse.merge("agent_events", rows, partitions=[day], replace=pl.col("occurred_date") == day)
    types = Counter(r["event_type"] for r in rows)
    context.log.info(f"{day}: {len(rows)} agent events from {len({r['trace_id'] for r in rows})} traces")
    return dg.MaterializeResult(
        metadata={
            **merge_metadata(result, warehouse),
            "dagster/row_count": len(rows),
            "event_types": dg.MetadataValue.json(dict(types.most_common())),
            "preview": preview(rows, ["step_index", "event_type", "model", "tool_called", "tool_success"]),
        }
    )


def _run_time(context: dg.AssetExecutionContext) -> datetime:
    record = context.instance.get_run_record_by_id(context.run.run_id)
    when = record.create_timestamp if record is not None else datetime.now(UTC)
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "semantic_errors",
            deps=["traces", "agent_events"],
            kinds={"delta"},
            group_name=GROUP,
            automation_condition=after_nightly_load(),
            description="One row per finding: class, detector and version, confidence, evidence, affected step, "
            "and the probability its trace was judged with.",
        ),
        dg.AssetSpec(
            "judge_calibration",
            deps=["traces"],
            kinds={"delta"},
            group_name=GROUP,
            automation_condition=after_nightly_load(),
            description="Per judge prompt version and check: self-agreement (Cohen's kappa) and agreement with "
            "human feedback, with counts.",
        ),
    ],
    partitions_def=daily,
    pool="llm",
)
def semantic_errors(context: dg.AssetExecutionContext, warehouse: Warehouse, llm: LLM, judge_policy: JudgePolicy):
    day = day_of(context)
    policy = judge_policy.load()
    traces = _traces_of(warehouse, day)
    found = judge_day.find_errors(traces, policy, llm, warehouse, context.run.run_id, day, _run_time(context))
    run = found.judged
    if run.skipped:
        context.log.warning(f"{day}: LLM judge {run.skipped}")
        # keep earlier judge findings of the day: only the heuristics' rows are replaced
        replace = (pl.col("occurred_date") == day) & ~pl.col("detector").str.starts_with("llm_judge:")
    else:
        replace = pl.col("occurred_date") == day
        context.log.info(
            f"{day}: judged {sum(s.judged for s in found.selections.values())} of {len(traces)} traces: "
            f"{run.sent} requests sent, {run.reused} found stored, ${run.cost_usd:.4f}"
            + (" (simulated)" if run.simulated else "")
        )
    if found.unknown_models:
        context.log.warning(f"{day}: context_overflow not checked for unknown models: {found.unknown_models}")
    result = warehouse.merge("semantic_errors", found.rows, partitions=[day], replace=replace)
    calibration = warehouse.merge("judge_calibration", found.calibration, partitions=[day])
    errors = [r for r in found.rows if r["is_error"]]
    rates = watch.rates(pl.DataFrame(found.rows or None, schema=_findings_schema()), len(traces))
    yield dg.MaterializeResult(
        asset_key="semantic_errors",
        metadata={
            **merge_metadata(result, warehouse),
            "dagster/row_count": len(found.rows),
            "traces": len(traces),
            "traces_judged": sum(s.judged for s in found.selections.values()),
            "judge": dg.MetadataValue.text(run.skipped or ("simulated" if run.simulated else "ran")),
            "judge_requests_sent": run.sent,
            "judge_requests_reused": run.reused,
            "judge_cost_usd": round(run.cost_usd, 6),
            "policy_version": policy.version,
            "unknown_models": dg.MetadataValue.json(found.unknown_models),
            "by_class": dg.MetadataValue.json(dict(found.by_class.most_common())),
            "rates": _rates_md(rates),
            "preview": preview(
                errors, ["error_class", "detector", "affected_step", "confidence", "judged_with_probability"]
            ),
        },
    )
    yield dg.MaterializeResult(
        asset_key="judge_calibration",
        metadata={
            **merge_metadata(calibration, warehouse),
            "dagster/row_count": len(found.calibration),
            "preview": preview(found.calibration, ["judge", "prompt_version", "check", "items", "kappa"]),
        },
    )


def _findings_schema() -> dict:
    from pipelines.record.schema import SEMANTIC_ERRORS

    return pl.from_arrow(SEMANTIC_ERRORS.empty_table()).schema


@dg.asset(
    deps=["traces"],
    partitions_def=daily,
    kinds={"delta"},
    group_name=GROUP,
    pool="warehouse",
    automation_condition=after_nightly_load(),
    description="Violations of each trace's message history (state validator); the first of each trace marked.",
)
def state_violations(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    day = day_of(context)
    traces = _traces_of(warehouse, day)
    rows = judge_day.violations(traces, day)
    result = warehouse.merge("state_violations", rows, partitions=[day], replace=pl.col("occurred_date") == day)
    codes = Counter(r["code"] for r in rows if r["first_in_trace"])
    return dg.MaterializeResult(
        metadata={
            **merge_metadata(result, warehouse),
            "dagster/row_count": len(rows),
            "traces": len(traces),
            "traces_violating": sum(codes.values()),
            "first_violation_by_code": dg.MetadataValue.json(dict(codes.most_common())),
            "preview": preview([r for r in rows if r["first_in_trace"]], ["code", "step_index", "detail"]),
        }
    )


# -- checks ----------------------------------------------------------------------------------------


def _warn(passed: bool, description: str, metadata: dict) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=passed, severity=dg.AssetCheckSeverity.WARN, description=description, metadata=metadata
    )


@dg.asset_check(
    asset="semantic_errors",
    partitions_def=daily,
    automation_condition=after_inputs(),
    description="Warns when a class's rate (the lower bound of its 95% interval) is above its threshold.",
)
def semantic_error_rate(
    context: dg.AssetCheckExecutionContext, warehouse: Warehouse, judge_policy: JudgePolicy
) -> dg.AssetCheckResult:
    day = day_of(context)
    policy = judge_policy.load()
    traces = warehouse.read("traces", pl.col("occurred_date") == day, ["trace_id"]).height
    findings = warehouse.read("semantic_errors", pl.col("occurred_date") == day)
    rates = watch.rates(findings, traces)
    over = watch.rates_over(rates, policy)
    text = ", ".join(
        f"{r.error_class} {r.rate:.1%} (95% CI {r.low:.1%}-{r.high:.1%}, threshold "
        f"{policy.class_rate_thresholds[r.error_class]:.1%})"
        for r in over
    )
    return _warn(
        not over,
        f"above threshold: {text}" if over else "no class rate above its threshold",
        {"classes_over": len(over), "traces": traces, "rates": _rates_md(rates), "alert": text or "none"},
    )


def _events(warehouse: Warehouse, day: date) -> pl.DataFrame:
    return warehouse.read(
        "agent_events",
        pl.col("occurred_date") == day,
        ["session_id", "trace_id", "step_index", "event_type", "cost_usd"],
    )


@dg.asset_check(
    asset="agent_events",
    partitions_def=daily,
    automation_condition=after_inputs(),
    description="Warns when more sessions than the policy allows ran past its step (default: >5 past step 7).",
)
def deep_sessions(
    context: dg.AssetCheckExecutionContext, warehouse: Warehouse, judge_policy: JudgePolicy
) -> dg.AssetCheckResult:
    policy = judge_policy.load()
    deep = watch.deep_sessions(_events(warehouse, day_of(context)), policy)
    t = policy.thresholds
    passed = deep.height <= t.deep_sessions
    return _warn(
        passed,
        f"{deep.height} sessions passed step {t.deep_step} (allowed {t.deep_sessions})",
        {
            "sessions_past_step": deep.height,
            "step": t.deep_step,
            "allowed": t.deep_sessions,
            # the sessions themselves by query (ids stay out of Dagster's storage, see assets/reporting.py)
            "sessions": preview(deep.to_dicts(), ["last_step"], limit=20),
            "find_them": dg.MetadataValue.md(
                f'`tracelake sql "SELECT session_id, max(step_index) AS last_step FROM agent_events '
                f"WHERE occurred_date = '{day_of(context)}' GROUP BY 1 HAVING max(step_index) > {t.deep_step}\"`"
            ),
        },
    )


@dg.asset_check(
    asset="agent_events",
    partitions_def=daily,
    automation_condition=after_inputs(),
    description="Warns when a session's cost is above the policy's threshold (default $0.50).",
)
def session_cost(
    context: dg.AssetCheckExecutionContext, warehouse: Warehouse, judge_policy: JudgePolicy
) -> dg.AssetCheckResult:
    policy = judge_policy.load()
    costly = watch.costly_sessions(_events(warehouse, day_of(context)), policy)
    limit = policy.thresholds.session_cost_usd
    return _warn(
        costly.is_empty(),
        f"{costly.height} sessions cost more than ${limit:.2f}"
        + (f"; the costliest ${costly['cost_usd'][0]:.2f}" if not costly.is_empty() else ""),
        {
            "sessions_over": costly.height,
            "threshold_usd": limit,
            "sessions": preview(costly.to_dicts(), ["cost_usd", "calls"], limit=20),
            "find_them": dg.MetadataValue.md(
                f'`tracelake sql "SELECT session_id, sum(cost_usd) AS cost_usd FROM agent_events '
                f"WHERE occurred_date = '{day_of(context)}' GROUP BY 1 HAVING sum(cost_usd) > {limit}\"`"
            ),
        },
    )


# Great Expectations on the agent log (pipelines/ingest/quality.py): every llm.call has a calls row, every
# tool.invoke says whether it succeeded, each session.end's total tokens equals the sum over its calls.
# Not blocking: a source that logs calls only as spans fails the first rule, and the judge must still run.
agent_events_quality = quality_check("agent_events", blocking=False)


checks = [semantic_error_rate, deep_sessions, session_cost, agent_events_quality]
assets = [agent_events, semantic_errors, state_violations]


# -- alerts ----------------------------------------------------------------------------------------


def alerts_of_run(instance: dg.DagsterInstance, run_id: str) -> list[Alert]:
    """The judge warnings that failed in a run, as alerts."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION).records
    out = []
    for record in records:
        event = record.event_log_entry.dagster_event
        evaluation = event.event_specific_data
        if evaluation.check_name not in ALERT_CHECKS or evaluation.passed:
            continue
        details = {
            k: v.value if hasattr(v, "value") else v
            for k, v in (evaluation.metadata or {}).items()
            if not isinstance(v, dg.MarkdownMetadataValue)
        }
        out.append(
            Alert(
                check=evaluation.check_name,
                asset=evaluation.asset_key.to_user_string(),
                partition=evaluation.partition,
                summary=evaluation.description or evaluation.check_name,
                details=details,
                run_id=run_id,
            )
        )
    return out


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.SUCCESS,
    name="judge_alerts",
    description="Posts each failed judge warning of a finished run to the alert webhook as Slack-compatible JSON.",
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def judge_alerts(context: dg.RunStatusSensorContext, alert_webhook: AlertWebhook):
    alerts = alerts_of_run(context.instance, context.dagster_run.run_id)
    for alert in alerts:
        if alert_webhook.configured:
            alert_webhook.send(slack_payload(alert))
        context.log.info(f"alert {alert.check} on {alert.asset} {alert.partition}: {alert.summary}")
    return dg.SkipReason(
        f"{len(alerts)} alerts posted" if alert_webhook.configured else f"{len(alerts)} alerts (no webhook)"
    )
