"""Jobs: one per stage (``tracelake run STAGE``) and the nightly run of all stages in order."""

from __future__ import annotations

import dagster as dg

from assets.maintenance import maintenance
from assets.retention import retention_sweep
from pipelines.pod_resources import HEAVY

STAGES = ("ingest", "retention", "rot")

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
jobs = [*stage_jobs.values(), nightly, retention_sweep, maintenance]
