"""Jobs: the raw-trace load of one day x shard, one job per stage (``tracelake run STAGE``)
and the nightly run of every daily stage in order.

Dagster runs one partitions definition per job, so the load (day x shard) is a job of its
own and the daily jobs hold what follows it. None of them carries an automation condition:
the daily stages start by the conditions on their assets (pipelines/automation.py), and
these jobs are for the CLI, the Launchpad and re-execution.
"""

from __future__ import annotations

import dagster as dg

from assets.ingest import LOADED
from assets.maintenance import maintenance
from assets.retention import retention_sweep
from pipelines.pod_resources import HEAVY

STAGES = ("ingest", "retention", "rot", "judge")
# what a run does, for the instance's tag concurrency limits (deploy/dagster.yaml)
STAGE_TAG = "tracelake/stage"
# the STAGE_TAG of the runs the daily_stages automation sensor launches (pipelines/sensors.py)
AUTOMATED_STAGE = "daily"

load_selection = dg.AssetSelection.assets(*LOADED)
# the daily jobs check the loaded tables once a day is in, not once per shard
loaded_checks = dg.AssetSelection.checks_for_assets(*LOADED)
# the assets and checks the daily_stages automation sensor evaluates (pipelines/sensors.py)
daily_selection = dg.AssetSelection.groups(*STAGES) - load_selection | loaded_checks


def daily_job(name: str, groups: tuple[str, ...], description: str) -> dg.UnresolvedAssetJobDefinition:
    """The stages of ``groups`` for one day, without the load (with the loaded tables' checks)."""
    selection = dg.AssetSelection.groups(*groups) - load_selection
    if "ingest" in groups:
        selection = selection | loaded_checks
    return dg.define_asset_job(
        name,
        selection=selection,
        description=description,
        tags={**HEAVY.get(name, {}), STAGE_TAG: name},
    )


load = dg.define_asset_job(
    "load",
    selection=load_selection.without_checks(),
    description="The raw-trace load of one day x shard: calls, spans, ingest_log, quarantine, redaction_audit.",
    tags={**HEAVY["ingest"], STAGE_TAG: "load"},
)
stage_jobs = {
    "ingest": daily_job("ingest", ("ingest",), "traces and the checks of the loaded tables for one day."),
    **{stage: daily_job(stage, (stage,), f"The {stage} stage for one day.") for stage in STAGES[1:]},
}
nightly = daily_job(
    "nightly",
    STAGES,
    "Every daily stage for one day, in order: " + " -> ".join(STAGES) + " (without the load: `load` is day x shard).",
)
# Replay is candidate x day (partitions from its assets), so it cannot be part of the daily nightly job: the
# nightly_replay sensor starts one run of it per active candidate after a day's nightly stages succeeded.
replay = dg.define_asset_job(
    "replay",
    selection=dg.AssetSelection.groups("replay"),
    description="The replay stage for one candidate x day: replays, then replay_summary.",
)
jobs = [load, *stage_jobs.values(), nightly, retention_sweep, replay, maintenance]
