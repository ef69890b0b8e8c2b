"""Replay stage: a candidate's replays of a day (`replays`) and their per-segment
summary (`replay_summary`), partitioned candidate x day. The candidate comes
from the partition key, never run config, so a UI backfill needs nothing else.
"""

from collections import Counter
from collections.abc import Sequence

import dagster as dg
import polars as pl

from assets.reporting import merge_metadata, preview
from pipelines.jobs import nightly
from pipelines.jobs import replay as replay_job
from pipelines.partitions import (
    CANDIDATE_PARTITIONS,
    DAY_OF_CANDIDATE_DAY,
    candidate_day_key,
    candidate_day_of,
    candidate_days,
)
from pipelines.partitions import candidates as candidate_dimension
from pipelines.printable import inert
from pipelines.replay.bodies import answer_of
from pipelines.replay.candidates import Candidate, CandidateError, template_problem
from pipelines.replay.day import CALL_COLUMNS, DayInputs, latest_rot, replay_day
from pipelines.replay.judging import pairwise_judge
from pipelines.replay.report import SEGMENT_COLUMNS, segment_table_rows
from pipelines.replay.summary import summarize
from pipelines.resources.candidates import CandidateRegistry
from pipelines.resources.judge import JudgePolicy
from pipelines.resources.llm import LLM, LLMRequest, LLMResult
from pipelines.resources.stores import TemplateStore
from pipelines.resources.warehouse import Warehouse


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


def day_inputs(candidate: Candidate, day, warehouse: Warehouse, templates: TemplateStore) -> DayInputs:
    """The day's calls with their latest rot check and redaction mode."""
    calls = warehouse.read("calls", pl.col("occurred_date") == day, list(CALL_COLUMNS)).to_dicts()
    return DayInputs(
        candidate=candidate,
        day=day,
        calls=calls,
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
        template_source=template_source(candidate, templates),
    )


def asker(llm: LLM, warehouse: Warehouse, run_id: str, log, counts: Counter):
    """Requests -> results by key: one LLM resource run (Message Batches) per round, counted."""

    def ask(outgoing: Sequence[LLMRequest]) -> dict[str, LLMResult]:
        requests = list(outgoing)
        results = {}
        for result in llm.run(requests, warehouse, run_id=run_id, batch=True):
            counts["reused" if result.reused else "sent"] += 1
            counts[f"status_{result.status}"] += 1
            results[result.key] = result
        log.info(f"{len(requests)} requests: {counts['sent']} sent so far, {counts['reused']} answered from the ledger")
        return results

    return ask


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
    "old and new output, tokens, cost and the verdict with what decided it.",
)
def replays(
    context: dg.AssetExecutionContext,
    warehouse: Warehouse,
    llm: LLM,
    candidate_registry: CandidateRegistry,
    template_store: TemplateStore,
    judge_policy: JudgePolicy,
) -> dg.MaterializeResult:
    candidate_id, day = candidate_day_of(context)
    candidate = candidate_registry.get(candidate_id)
    inputs = day_inputs(candidate, day, warehouse, template_store)
    counts: Counter = Counter()
    ask = asker(llm, warehouse, context.run.run_id, context.log, counts)
    judge = judge_policy.load().judge
    inputs.judge = pairwise_judge(ask, model=judge.model, candidate=candidate_id)
    rows = replay_day(inputs, sender(ask), run_id=context.run.run_id)
    result = warehouse.merge("replays", rows, partitions=[candidate_id])
    fidelities = Counter(r["fidelity"] for r in rows)
    verdicts = Counter(r["verdict"] for r in rows if r["verdict"])
    context.log.info(
        f"{candidate_id} {day}: {len(rows)} replays of {len(inputs.calls)} calls; "
        + ", ".join(f"{n} {f}" for f, n in fidelities.most_common())
    )
    return dg.MaterializeResult(
        metadata={
            **merge_metadata(result, warehouse),
            "dagster/row_count": len(rows),
            "candidate": candidate_id,
            "candidate_revision": candidate.revision,
            "changes": ", ".join(candidate.changes) or "none",
            "requests_sent": counts["sent"],
            "requests_reused": counts["reused"],
            "cost_usd": round(sum((r["cost_usd"] or 0) + (r["judge_cost_usd"] or 0) for r in rows), 6),
            "judge_cost_usd": round(sum(r["judge_cost_usd"] or 0 for r in rows), 6),
            "comparison": candidate.comparison,
            "decided_by": dg.MetadataValue.json(dict(Counter(r["decided_by"] for r in rows if r["decided_by"]))),
            "simulated": dg.MetadataValue.bool(any(r["simulated"] for r in rows)),
            "fidelity": dg.MetadataValue.json(dict(fidelities)),
            "verdicts": dg.MetadataValue.json(dict(verdicts)),
            "preview": preview(rows, ["service", "mode", "sample_index", "fidelity", "verdict", "decided_by"]),
        }
    )


@dg.asset(
    deps=[replays],
    partitions_def=candidate_days,
    kinds={"delta"},
    group_name="replay",
    pool="warehouse",
    # eager for any day, not only the latest: backfilled days get their summary too
    automation_condition=dg.AutomationCondition.eager().without(dg.AutomationCondition.in_latest_time_window()),
    description="Per candidate, day, mode, fidelity and segment: improved / regressed / same with Wilson "
    "intervals, a paired sign test, Benjamini-Hochberg across segments, cost, and a flag when the aggregate "
    "improves while a segment significantly regresses.",
)
def replay_summary(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    candidate_id, day = candidate_day_of(context)
    rows = warehouse.read("replays", (pl.col("candidate") == candidate_id) & (pl.col("day") == day)).to_dicts()
    summary = summarize(rows, candidate_id, day)
    result = warehouse.merge("replay_summary", summary, partitions=[candidate_id])
    flagged = any(r["hides_regression"] for r in summary)
    return dg.MaterializeResult(
        metadata={
            **merge_metadata(result, warehouse),
            "dagster/row_count": len(summary),
            "replays": len(rows),
            "hides_regression": dg.MetadataValue.bool(flagged),
            "regressed_segments": ", ".join(sorted({s for r in summary for s in r["regressed_segments"]})) or "none",
            "cost_usd": round(sum(r["cost_usd"] for r in summary if r["segment_key"] == "all"), 6),
            "simulated": dg.MetadataValue.bool(any(r["simulated"] for r in summary)),
            "segments": preview(segment_table_rows(summary), SEGMENT_COLUMNS, limit=200),
        }
    )


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Adds a candidate partition for every valid candidate in the registry (TRACELAKE_CANDIDATES); "
    "files with a bad slug or bad content are rejected with the reason.",
)
def candidate_partitions_sync(context: dg.SensorEvaluationContext, candidate_registry: CandidateRegistry):
    found, rejected = candidate_registry.load()
    for error in rejected:
        context.log.error(f"rejected candidate file: {inert(str(error))}")
    known = set(context.instance.get_dynamic_partitions(CANDIDATE_PARTITIONS))
    new = sorted(set(found) - known)
    problems = "; ".join(inert(str(e)) for e in rejected)
    if not new:
        return dg.SkipReason(
            f"no new candidates ({len(found)} known)" + (f"; rejected: {problems}" if problems else "")
        )
    context.log.info(f"adding candidate partitions: {', '.join(new)}")
    return dg.SensorResult(dynamic_partitions_requests=[candidate_dimension.build_add_request(new)])


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.SUCCESS,
    monitored_jobs=[nightly],
    request_job=replay_job,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="After the nightly job succeeds for a day, one replay run per active candidate for that day.",
)
def nightly_replay(context: dg.RunStatusSensorContext, candidate_registry: CandidateRegistry):
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
