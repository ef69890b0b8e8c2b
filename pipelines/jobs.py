"""Jobs: the raw-trace load of one day x shard, one job per stage (``tracelake run STAGE``)
and the nightly run of every daily stage in order.

Dagster runs one partitions definition per job, so the load (day x shard) is a job of its
own and the daily jobs hold what follows it. Two of them start themselves, by declarative
automation, once every shard of a day has landed and none is running or failed
(``shards_landed``): ``nightly`` when a shard run of the nightly schedule (``NIGHTLY_TAG``)
landed, ``ingest`` (traces and the checks of the loaded tables) when other shard runs did
(the source sensor, a backfill, a shard run by hand).
"""

from __future__ import annotations

import warnings

import dagster as dg

from assets.maintenance import maintenance
from assets.retention import retention_sweep
from pipelines.pod_resources import HEAVY

# Automation conditions on jobs are a preview API in Dagster 1.13; dagster is pinned exactly.
warnings.filterwarnings(
    "ignore", message=".*(all_job_root_assets_match|automation_condition).* is currently in preview"
)

STAGES = ("ingest", "retention", "rot", "judge")
# the tables the raw-trace load writes in one step (assets/ingest.py raw_traces)
LOADED = ("calls", "spans", "ingest_log", "quarantine", "redaction_audit")
# on the shard runs the nightly schedule launches: their day then gets the whole nightly job
NIGHTLY_TAG = "tracelake/nightly"
# what a run does, for the instance's tag concurrency limits (deploy/dagster.yaml)
STAGE_TAG = "tracelake/stage"

load_selection = dg.AssetSelection.assets(*LOADED)
# the daily jobs check the loaded tables once a day is in, not once per shard
loaded_checks = dg.AssetSelection.checks_for_assets(*LOADED)


def shards_landed() -> dg.AutomationCondition:
    """Every shard of the day has materialized, and none is running or failed last time."""
    not_landed = dg.AutomationCondition.missing() | dg.AutomationCondition.in_progress()
    return ~dg.AutomationCondition.any_deps_match(not_landed | dg.AutomationCondition.execution_failed()).with_label(
        "every shard of the day landed"
    )


def shard_updated(nightly: bool) -> dg.AutomationCondition:
    """A shard of the day materialized since the job last updated the day, by a run of
    the nightly schedule (``nightly``) or by any other run."""
    updated = dg.AutomationCondition.newly_updated()
    if nightly:
        updated = updated & dg.AutomationCondition.any_new_update_has_run_tags(tag_keys={NIGHTLY_TAG})
    else:
        updated = updated & ~dg.AutomationCondition.all_new_updates_have_run_tags(tag_keys={NIGHTLY_TAG})
    job = "nightly" if nightly else "ingest"
    # handled once this job (its runs carry its STAGE_TAG) has updated the day: a run of the other
    # job, or a request, does not count (a job's request is not an asset's)
    handled = dg.AutomationCondition.newly_updated() & dg.AutomationCondition.any_new_update_has_run_tags(
        tag_values={STAGE_TAG: job}
    )
    label = "a nightly shard run landed" if nightly else "a shard landed"
    return dg.AutomationCondition.any_deps_match(updated).since(handled).with_label(label)


def day_ready(nightly: bool) -> dg.AutomationCondition:
    """The condition on the daily job's first assets (those that read the loaded tables):
    never while one of them runs, or after its last run failed (re-run it by hand)."""
    idle = ~dg.AutomationCondition.in_progress() & ~dg.AutomationCondition.execution_failed()
    ready = shard_updated(nightly) & shards_landed() & idle
    if not nightly:  # the nightly job does what the ingest job would, and more
        ready = ready & ~shard_updated(nightly=True)
    return dg.AutomationCondition.all_job_root_assets_match(ready)


def daily_job(
    name: str, groups: tuple[str, ...], description: str, automated: bool = False
) -> dg.UnresolvedAssetJobDefinition:
    """The stages of ``groups`` for one day, without the load (with the loaded tables' checks)."""
    selection = dg.AssetSelection.groups(*groups) - load_selection
    if "ingest" in groups:
        selection = selection | loaded_checks
    return dg.define_asset_job(
        name,
        selection=selection,
        description=description,
        tags={**HEAVY.get(name, {}), STAGE_TAG: name},
        automation_condition=day_ready(nightly=name == "nightly") if automated else None,
    )


load = dg.define_asset_job(
    "load",
    selection=load_selection.without_checks(),
    description="The raw-trace load of one day x shard: calls, spans, ingest_log, quarantine, redaction_audit.",
    tags={**HEAVY["ingest"], STAGE_TAG: "load"},
)
stage_jobs = {
    "ingest": daily_job(
        "ingest", ("ingest",), "traces and the checks of the loaded tables for one day.", automated=True
    ),
    **{stage: daily_job(stage, (stage,), f"The {stage} stage for one day.") for stage in STAGES[1:]},
}
nightly = daily_job(
    "nightly",
    STAGES,
    "Every daily stage for one day, in order: "
    + " -> ".join(STAGES)
    + "; starts once every shard of the day landed after the nightly schedule launched them.",
    automated=True,
)
# Replay is candidate x day (partitions from its assets), so it cannot be part of the daily nightly job: the
# nightly_replay sensor starts one run of it per active candidate after nightly succeeds.
replay = dg.define_asset_job(
    "replay",
    selection=dg.AssetSelection.groups("replay"),
    description="The replay stage for one candidate x day: replays, then replay_summary.",
)
jobs = [load, *stage_jobs.values(), nightly, retention_sweep, replay, maintenance]
AUTOMATED = ("ingest", "nightly")


def executable(defs: dg.Definitions, name: str) -> dg.JobDefinition:
    """The job ``name`` to execute in process (the CLI, tests). An automated partitioned job
    cannot be subset or executed in process in Dagster 1.13 (dagster-io/dagster#34213, fix
    open): its assets and checks then run as the same selection of the asset job. Run it with
    the job's tags (``resolve_job_def(name).tags``): its automation condition reads them."""
    job = defs.resolve_job_def(name)
    if name not in AUTOMATED:
        return job
    return defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection=set(job.asset_layer.selected_asset_keys),
        asset_check_selection=set(job.asset_layer.asset_graph.asset_check_keys),
    )
