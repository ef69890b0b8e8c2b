"""One shard of a day as its own OS process: the run the sensors request for it, executed
against a shared Dagster instance (DAGSTER_HOME) and the tables of SETTINGS_JSON.

    python -m tests.ingest.shard_run SETTINGS_JSON DAY SHARD [NIGHTLY_DAY]
"""

from __future__ import annotations

import dataclasses
import json
import sys

import dagster as dg

from pipelines.definitions import build
from pipelines.instance import open_instance
from pipelines.sensors import shard_request
from pipelines.settings import Settings


def execute(defs: dg.Definitions, request: dg.RunRequest, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """Run what ``request`` asks for, in process: its job, assets, checks, partition and tags."""
    job = defs.resolve_job_def(request.job_name).get_subset(
        asset_selection=set(request.asset_selection or ()),
        asset_check_selection=None if request.asset_check_keys is None else set(request.asset_check_keys),
    )
    return job.execute_in_process(partition_key=request.partition_key, tags=request.tags, instance=instance)


def main() -> None:
    settings_json, day, shard = sys.argv[1:4]
    nightly_day = sys.argv[4] if len(sys.argv) > 4 else None
    settings = Settings(**json.loads(open(settings_json).read()))
    defs = build(settings)
    spec = settings.object_store().shard_spec
    request = shard_request(defs.get_repository_def(), spec, day, int(shard), f"test-{shard}", nightly_day)
    with open_instance() as instance:  # as the CLI opens it: created once however many shards start at once
        result = execute(defs, request, instance)
    print(json.dumps({"shard": int(shard), "run_id": result.run_id, "success": result.success}), flush=True)


def settings_file(settings: Settings, path) -> str:
    """Write ``settings`` where a shard process reads them."""
    fields = dataclasses.asdict(settings)
    fields["layouts"] = list(fields["layouts"])
    path.write_text(json.dumps(fields))
    return str(path)


if __name__ == "__main__":
    main()
