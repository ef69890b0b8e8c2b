"""Replay stage: a candidate's replays of a day (`replays`) and their per-segment
summary (`replay_summary`), partitioned candidate x day. The candidate comes
from the partition key, never run config, so a UI backfill needs nothing else.
"""

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import date

import dagster as dg
import polars as pl

from assets.replay_view import (
    SUMMARY_CHECK_SPECS,
    check_results,
    segment_table,
    window_metadata,
    write_plot,
)
from assets.reporting import merge_metadata, preview
from pipelines.jobs import AUTOMATED_STAGE, STAGE_TAG, nightly
from pipelines.jobs import replay as replay_job
from pipelines.llm.ledger import run_spend
from pipelines.llm.lifecycle import serve
from pipelines.partitions import (
    CANDIDATE_PARTITIONS,
    DAY_OF_CANDIDATE_DAY,
    candidate_day_key,
    candidate_day_of,
    candidate_days,
)
from pipelines.partitions import candidates as candidate_dimension
from pipelines.printable import inert
from pipelines.record.canonical import sha256_hex
from pipelines.replay.bodies import answer_of
from pipelines.replay.candidates import Candidate, CandidateError, example_yaml, template_problem
from pipelines.replay.day import CALL_COLUMNS, DayInputs, latest_rot, replay_day
from pipelines.replay.judging import pairwise_judge
from pipelines.replay.plan import ReplayPlan, plan_replay
from pipelines.replay.summary import summarize
from pipelines.replay.unlock import LOG_TABLE, Unlocker, log_rows
from pipelines.replay.window import checks, pool, request_costs
from pipelines.resources.candidates import CandidateRegistry
from pipelines.resources.judge import JudgePolicy
from pipelines.resources.llm import LLM, LLMRequest, LLMResult
from pipelines.resources.replay_key import ReplayKey
from pipelines.resources.stores import TemplateStore
from pipelines.resources.warehouse import Warehouse
from pipelines.settings import Settings

CANDIDATE_HELP = f"""A **candidate** is a prompt/model change to try on recorded traffic: one YAML file
`<id>.yaml` in the registry at `{Settings.from_env().candidates_uri}` (`TRACELAKE_CANDIDATES`). The
`candidate_partitions_sync` sensor makes each valid file a partition (only the registry adds
candidates; a rejected file fails the sensor's tick with the file and the reason).
`tracelake candidates new ID` writes this minimal file:

```yaml
{example_yaml("prompt-v5")}```"""


NO_RETRY_TAG = "dagster/retry_on_asset_or_op_failure"


def template_source(candidate: Candidate, templates: TemplateStore) -> str | None:
    """The candidate's template: inline, or a version in the template store."""
    if candidate.template_source is not None:
        return candidate.template_source
    if candidate.template is None:
        return None
    found = templates.get(candidate.template.id, candidate.template.version)
    if found is None:
        raise CandidateError(
            candidate.id,
            f"template {candidate.template.id} version {candidate.template.version} is not in the template "
            f"store at {templates.uri}; add it there or give template_source inline",
        )
    problem = template_problem(found.source)
    if problem:
        raise CandidateError(
            candidate.id, f"template {candidate.template.id} version {candidate.template.version}: {problem}"
        )
    return found.source


def day_inputs(
    candidate: Candidate, day: date, warehouse: Warehouse, templates: TemplateStore, read: DayInputs | None = None
) -> DayInputs:
    """The day's calls with their latest rot check and redaction mode (``read``: the day as read
    already for another candidate, reused)."""
    if read is None:
        read = DayInputs(
            candidate=candidate,
            day=day,
            calls=warehouse.read("calls", pl.col("occurred_date") == day, list(CALL_COLUMNS)).to_dicts(),
            rot=latest_rot(
                warehouse.read(
                    "rot_checks",
                    pl.col("occurred_date") == day,
                    ["call_id", "checked_at", "status", "components", "missing", "replay_fidelity"],
                ).to_dicts()
            ),
            redaction_modes=dict(
                warehouse.read(
                    "redaction_audit",
                    (pl.col("occurred_date") == day) & (pl.col("source_table") == "calls"),
                    ["call_id", "mode"],
                ).iter_rows()
            ),
        )
    return replace(read, candidate=candidate, template_source=template_source(candidate, templates))


def asker(llm: LLM, warehouse: Warehouse, run_id: str, log, counts: Counter):
    """Requests -> results by key: one LLM resource run (Message Batches) per round, counted."""

    def ask(outgoing: Sequence[LLMRequest]) -> dict[str, LLMResult]:
        requests = list(outgoing)
        results = {}
        round_counts: Counter = Counter()
        for result in llm.run(requests, warehouse, run_id=run_id, batch=True):
            fresh = "reused" if result.reused else "sent"
            round_counts[fresh] += 1
            round_counts[f"{fresh}_{result.status}"] += 1
            round_counts.update(f"dropped_{p}" for p in result.dropped if not result.reused)
            results[result.key] = result
        counts.update(round_counts)
        sent, errored = round_counts["sent"], round_counts["sent_errored"] + round_counts["sent_expired"]
        log.info(
            f"{len(requests)} requests: {sent} sent ({sent - errored} answered, {errored} errored), "
            f"{round_counts['reused']} answered from the ledger; run so far: {counts['sent']} sent, "
            f"{counts['sent_errored'] + counts['sent_expired']} errored"
        )
        return results

    return ask


def answered(llm: LLM, warehouse: Warehouse):
    """What the ledger answers, for a plan: (stored results by key, requests left, why some are sent again)."""

    def lookup(requests: Sequence[LLMRequest]):
        found = llm.plan(list(requests), warehouse)
        return found.stored, found.pending, found.resent

    return lookup


def plan_of(
    days: Sequence[DayInputs], llm: LLM, warehouse: Warehouse, judge_model: str, run_id: str | None = None
) -> ReplayPlan:
    """The replay plan of a candidate's days (nothing sent): the CLI's ``--plan`` and a run's first step."""
    return plan_replay(
        days,
        answered=answered(llm, warehouse),
        translator=llm.translator(run_id or "plan"),
        lifecycle=llm.lifecycle(),
        judge_model=judge_model,
        budget_usd=llm.cap(),
        spent_usd=run_spend(warehouse, run_id)[1] if run_id else 0.0,
        backend=llm.backend,
        max_batch_requests=llm.max_batch_requests,
        max_batch_bytes=llm.max_batch_bytes,
    )


def record_plan(context: dg.AssetExecutionContext, plan: ReplayPlan) -> None:
    """The plan in the run's log, as an observation of the partition (UI) and as run tags, before any spend."""
    for line in plan.lines():
        context.log.info(line)
    metadata = {"plan": dg.MetadataValue.md(plan.markdown()), **plan.metadata()}
    context.log_event(
        dg.AssetObservation(
            asset_key=context.asset_key,
            partition=context.partition_key,
            metadata={k: v for k, v in metadata.items() if v is not None},
        )
    )
    tags = {f"tracelake/{k}": str(v) for k, v in plan.metadata().items() if v is not None}
    context.instance.add_run_tags(context.run.run_id, {k: v[:1000] for k, v in tags.items()})


def log_decryptions(warehouse: Warehouse, unlocker: Unlocker, run_id: str, candidate: str) -> int:
    """The run's decryptions not yet in `unredaction_log`, appended there (before anything is sent)."""
    rows = log_rows(unlocker.unlogged(), purpose="replay", run_id=run_id, candidate=candidate)
    if rows:
        warehouse.merge(LOG_TABLE, rows)
    return len(rows)


def sender(ask):
    """``send`` for the replay core: the same rounds, read as Answers."""
    return lambda outgoing: {key: answer_of(result) for key, result in ask(outgoing).items()}


@dg.asset(
    deps=[dg.AssetDep("calls", partition_mapping=DAY_OF_CANDIDATE_DAY), "rot_checks"],
    partitions_def=candidate_days,
    kinds={"delta"},
    group_name="replay",
    pool="llm",
    description="One row per call x candidate x mode x sample: the fidelity of the replay, the request sent, "
    "old and new output, tokens, cost and the verdict with what decided it. Its metadata separates what this "
    "run sent and spent (the ledger) from what the partition's rows cost; a re-run answered from the ledger "
    "sends nothing, commits nothing and keeps its data version, so `replay_summary` does not run again.\n\n"
    + CANDIDATE_HELP,
)
def replays(
    context: dg.AssetExecutionContext,
    warehouse: Warehouse,
    llm: LLM,
    candidate_registry: CandidateRegistry,
    template_store: TemplateStore,
    judge_policy: JudgePolicy,
    replay_key: ReplayKey,
) -> dg.MaterializeResult:
    candidate_id, day = candidate_day_of(context)
    run_id = context.run.run_id
    try:
        candidate = candidate_registry.get(candidate_id)
        # encrypt-mode calls are decrypted in memory when the environment holds the replay key
        inputs = replace(day_inputs(candidate, day, warehouse, template_store), unlocker=replay_key.unlocker())
    except CandidateError as e:
        # a retry reads the same file: fail once, clearly, and say it is not retried
        context.instance.add_run_tags(run_id, {NO_RETRY_TAG: "false"})
        raise dg.Failure(
            description=f"{inert(str(e))} Partitions come from the registry at {candidate_registry.uri}; "
            "a candidate added by hand has no file behind it. Not retried.",
            allow_retries=False,
        ) from None
    judge = judge_policy.load().judge
    # first thing: what this run will send and cost, logged and recorded; nothing is sent when it is blocked
    plan = plan_of([inputs], llm, warehouse, judge.model, run_id)
    decrypted = log_decryptions(warehouse, inputs.unlocker, run_id, candidate_id)
    record_plan(context, plan)
    if plan.blocked:
        raise dg.Failure(
            description=f"{candidate_id} {day}: stopped before sending anything: " + "; ".join(plan.blocked),
            metadata={"plan": dg.MetadataValue.md(plan.markdown())},
        )
    lifecycle = llm.lifecycle()
    inputs = replace(inputs, serve=lambda body: serve(lifecycle, body))
    counts: Counter = Counter()
    ask = asker(llm, warehouse, run_id, context.log, counts)
    inputs.judge = pairwise_judge(ask, model=judge.model, candidate=candidate_id)
    rows = replay_day(inputs, sender(ask), run_id=run_id)
    decrypted += log_decryptions(warehouse, inputs.unlocker, run_id, candidate_id)
    result = warehouse.merge("replays", rows, partitions=[candidate_id])
    fidelities = Counter(r["fidelity"] for r in rows)
    verdicts = Counter(r["verdict"] for r in rows if r["verdict"])
    errored = counts["sent_errored"] + counts["sent_expired"]
    context.log.info(
        f"{candidate_id} {day}: {len(rows)} replays of {len(inputs.calls)} calls; "
        + ", ".join(f"{n} {f}" for f, n in fidelities.most_common())
    )
    if counts["sent"] and errored == counts["sent"]:
        # rows are stored (a re-run sends the failed requests again); the run says it failed
        first = next((r["error"] for r in rows if r["error"]), "no detail")
        raise dg.Failure(
            description=f"{candidate_id} {day}: every one of the {counts['sent']} requests sent came back "
            f"errored (first: {first}); the summary would say nothing. A re-run sends them again.",
        )
    if errored:
        context.log.warning(f"{errored} of {counts['sent']} requests sent came back errored; a re-run retries them")
    requests_billed, spent = run_spend(warehouse, run_id)
    committed = result.inserted + result.updated + result.deleted
    if not counts["sent"] and not committed:
        context.log.info(f"{candidate_id} {day}: 0 sent, nothing committed: every answer came from the ledger")
    partition = (pl.col("candidate") == candidate_id) & (pl.col("day") == day)
    stored = warehouse.read("replays", partition, ["record_sha256"])
    return dg.MaterializeResult(
        # the partition's content: unchanged by a re-run that commits nothing (replay_summary follows changes)
        data_version=dg.DataVersion(sha256_hex("\n".join(sorted(stored["record_sha256"].to_list())))),
        metadata={
            "this_run": f"{counts['sent']} sent, ${spent:.4f} spent; "
            + (f"{committed} rows committed" if committed else "nothing committed (answered from the ledger)"),
            "spent_this_run_usd": round(spent, 6),
            "requests_billed_this_run": requests_billed,
            "cost_of_rows_usd": round(sum((r["cost_usd"] or 0) + (r["judge_cost_usd"] or 0) for r in rows), 6),
            **merge_metadata(result, warehouse),
            "dagster/row_count": len(rows),
            "candidate": candidate_id,
            "candidate_revision": candidate.revision,
            "changes": ", ".join(candidate.changes) or "none",
            "plan": dg.MetadataValue.md(plan.markdown()),
            **{k: v for k, v in plan.metadata().items() if v is not None},
            "calls_decrypted": decrypted,
            "requests_sent": counts["sent"],
            "requests_reused": counts["reused"],
            "requests_errored": errored,
            "parameters_dropped": dg.MetadataValue.json(
                {k.removeprefix("dropped_"): n for k, n in counts.items() if k.startswith("dropped_")}
            ),
            "substituted_rows": sum(1 for r in rows if r["substituted_from"]),
            "judge_cost_usd": round(sum(r["judge_cost_usd"] or 0 for r in rows), 6),
            "comparison": candidate.comparison,
            "decided_by": dg.MetadataValue.json(dict(Counter(r["decided_by"] for r in rows if r["decided_by"]))),
            "simulated": dg.MetadataValue.bool(any(r["simulated"] for r in rows)),
            "fidelity": dg.MetadataValue.json(dict(fidelities)),
            "verdicts": dg.MetadataValue.json(dict(verdicts)),
            "preview": preview(rows, ["service", "mode", "sample_index", "fidelity", "verdict", "decided_by"]),
        },
    )


# A re-run that sends nothing and commits nothing keeps the data version of `replays`,
# so the summary follows only real changes (and a run that asks for both in one go).
SUMMARY_AUTOMATION = (
    dg.AutomationCondition.eager()
    .without(dg.AutomationCondition.in_latest_time_window())
    .replace(
        "any_deps_updated",
        dg.AutomationCondition.any_deps_match(
            dg.AutomationCondition.data_version_changed() | dg.AutomationCondition.will_be_requested()
        ).with_label("any_deps_changed"),
    )
)


@dg.asset(
    deps=[replays],
    partitions_def=candidate_days,
    kinds={"delta"},
    group_name="replay",
    pool="warehouse",
    # eager for any day, not only the latest (backfilled days get their summary too), on a changed data version
    automation_condition=SUMMARY_AUTOMATION,
    check_specs=SUMMARY_CHECK_SPECS,
    description="The decision on a candidate. Per candidate, day, mode, fidelity and segment: improved / "
    "regressed / same with Wilson intervals, a paired sign test, Benjamini-Hochberg across segments and cost; "
    "and every day replayed so far pooled into one view (the `window_*` metadata, a plot, regressed examples). "
    "Four warn checks say whether the aggregate hides a segment regression, a segment regresses, the replays are "
    "mostly approximate, or the cost is over the candidate's `budget_usd`.\n\n" + CANDIDATE_HELP,
)
def replay_summary(
    context: dg.AssetExecutionContext, warehouse: Warehouse, candidate_registry: CandidateRegistry
) -> dg.MaterializeResult:
    candidate_id, day = candidate_day_of(context)
    window = warehouse.read("replays", pl.col("candidate") == candidate_id).to_dicts()
    rows = [r for r in window if r["day"] == day]
    summary = summarize(rows, candidate_id, day)
    # the partition's groups as of now: a group that no longer exists goes
    where = (pl.col("candidate") == candidate_id) & (pl.col("day") == day)
    result = warehouse.merge("replay_summary", summary, partitions=[candidate_id], replace=where)
    view = pool(window, candidate_id, request_costs(warehouse, window))
    try:
        budget = candidate_registry.get(candidate_id).budget_usd
    except CandidateError as e:
        context.log.warning(f"no budget check: {inert(str(e))}")
        budget = None
    plot = write_plot(view, warehouse.uri)
    return dg.MaterializeResult(
        metadata={
            **window_metadata(view, plot),
            "day": str(day),
            "day_hides_regression": dg.MetadataValue.bool(any(r["hides_regression"] for r in summary)),
            "day_segments": segment_table(summary),
            "day_cost_usd": round(sum(r["cost_usd"] for r in summary if r["segment_key"] == "all"), 6),
            "replays": len(rows),
            "simulated": dg.MetadataValue.bool(any(r["simulated"] for r in summary)),
            **merge_metadata(result, warehouse),
            "dagster/row_count": len(summary),
        },
        check_results=check_results(checks(view, budget), plot),
    )


class CandidateFilesRejected(Exception):
    """A registry file the sensor cannot make a candidate of: fails the tick, so the UI shows it."""


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Makes the candidate partitions what the registry (TRACELAKE_CANDIDATES) holds: adds one for "
    "every valid file, removes one that has no file (added by hand: no phantom candidates). A file with a bad "
    "slug or bad content fails the tick with the file and the reason, until it is fixed or removed.",
)
def candidate_partitions_sync(context: dg.SensorEvaluationContext, candidate_registry: CandidateRegistry):
    found, rejected = candidate_registry.load()
    problems = [inert(str(e)) for e in rejected]
    for problem in problems:
        context.log.error(f"rejected candidate file: {problem}")
    known = set(context.instance.get_dynamic_partitions(CANDIDATE_PARTITIONS))
    new = sorted(set(found) - known)
    phantom = sorted(known - candidate_registry.ids_on_file())
    requests = []
    if new:
        context.log.info(f"adding candidate partitions: {', '.join(new)}")
        requests.append(candidate_dimension.build_add_request(new))
    if phantom:
        context.log.warning(
            f"removing candidate partitions with no file in {candidate_registry.uri}: {', '.join(phantom)}"
        )
        requests.append(candidate_dimension.build_delete_request(phantom))
    if requests:
        return dg.SensorResult(dynamic_partitions_requests=requests)
    if problems:
        raise CandidateFilesRejected(
            f"{len(problems)} candidate file(s) rejected in {candidate_registry.uri} ({len(found)} valid): "
            + " | ".join(problems)
        )
    return dg.SkipReason(f"no new candidates ({len(found)} known)")


def nightly_stages_ran(run: dg.DagsterRun) -> bool:
    """The run holds a day's nightly stages: the ``nightly`` job, or the daily_stages automation's
    run of every stage after the nightly load (its asset selection covers rot_checks)."""
    if run.job_name == nightly.name:
        return True
    return run.tags.get(STAGE_TAG) == AUTOMATED_STAGE and dg.AssetKey("rot_checks") in (run.asset_selection or ())


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.SUCCESS,
    request_job=replay_job,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="After a day's nightly stages succeed (the nightly job, or the daily_stages automation's run "
    "after the nightly load), one replay run per active candidate for that day.",
)
def nightly_replay(context: dg.RunStatusSensorContext, candidate_registry: CandidateRegistry):
    if not nightly_stages_ran(context.dagster_run):
        return dg.SkipReason(f"run {context.dagster_run.run_id} did not hold a day's nightly stages")
    day = context.dagster_run.tags.get("dagster/partition")
    if not day:
        return dg.SkipReason("the nightly run has no day partition")
    known = set(context.instance.get_dynamic_partitions(CANDIDATE_PARTITIONS))
    active = [c.id for c in candidate_registry.active()]
    waiting = [c for c in active if c not in known]
    if waiting:
        context.log.warning(f"candidates not yet synced as partitions, replayed next night: {', '.join(waiting)}")
    return [
        dg.RunRequest(run_key=f"replay-{c}-{day}", partition_key=candidate_day_key(c, day))
        for c in active
        if c in known
    ]


# replay_summary follows replays (eager) wherever replays came from: the nightly
# runs, the CLI, or a backfill of replays alone launched from the UI.
replay_automation = dg.AutomationConditionSensorDefinition(
    "replay_automation",
    target=dg.AssetSelection.groups("replay"),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Materializes replay_summary for every candidate x day whose replays were updated.",
)
