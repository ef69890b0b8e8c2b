"""Jobs: one per stage (``tracelake run STAGE``) and the nightly run of all stages in order."""

from __future__ import annotations

import dagster as dg

from assets.retention import retention_sweep

STAGES = ("ingest", "retention", "rot", "judge")

stage_jobs = {
    stage: dg.define_asset_job(
        stage,
        selection=dg.AssetSelection.groups(stage),
        description=f"The {stage} stage for one day.",
    )
    for stage in STAGES
}
nightly = dg.define_asset_job(
    "nightly",
    selection=dg.AssetSelection.groups(*STAGES),
    description="Every stage for one day, in order: " + " -> ".join(STAGES) + ".",
)
jobs = [*stage_jobs.values(), nightly, retention_sweep]
