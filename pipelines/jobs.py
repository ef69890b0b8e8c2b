"""Jobs: one per stage (``tracelake run STAGE``) and the nightly run of all stages in order."""

from __future__ import annotations

import dagster as dg

from assets.maintenance import maintenance
from assets.retention import retention_sweep
from pipelines.pod_resources import HEAVY

STAGES = ("ingest", "retention", "rot", "judge")

stage_jobs = {
    stage: dg.define_asset_job(
        stage,
        selection=dg.AssetSelection.groups(stage),
        description=f"The {stage} stage for one day.",
        tags=HEAVY.get(stage),
    )
    for stage in STAGES
}
nightly = dg.define_asset_job(
    "nightly",
    selection=dg.AssetSelection.groups(*STAGES),
    description="Every stage for one day, in order: " + " -> ".join(STAGES) + ".",
    tags=HEAVY["nightly"],
)
# Replay is candidate x day (partitions from its assets), so it cannot be part of the daily nightly job: the
# nightly_replay sensor starts one run of it per active candidate after nightly succeeds.
replay = dg.define_asset_job(
    "replay",
    selection=dg.AssetSelection.groups("replay"),
    description="The replay stage for one candidate x day: replays, then replay_summary.",
)
jobs = [*stage_jobs.values(), nightly, retention_sweep, replay, maintenance]
