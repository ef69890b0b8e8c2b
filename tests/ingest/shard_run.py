"""One shard of a day as its own OS process: a run of the ``load`` job for the day x shard
partition, executed against a shared Dagster instance (DAGSTER_HOME) and the tables of
SETTINGS_JSON.

    python -m tests.ingest.shard_run SETTINGS_JSON DAY SHARD_KEY
"""

from __future__ import annotations

import dataclasses
import json
import sys

from pipelines.definitions import build
from pipelines.instance import open_instance
from pipelines.partitions import day_shard_key
from pipelines.settings import Settings


def main() -> None:
    settings_json, day, shard = sys.argv[1:4]
    settings = Settings(**json.loads(open(settings_json).read()))
    load = build(settings).resolve_job_def("load")
    with open_instance() as instance:  # as the CLI opens it: created once however many shards start at once
        result = load.execute_in_process(
            partition_key=day_shard_key(day, shard), instance=instance, raise_on_error=False
        )
    print(json.dumps({"shard": shard, "run_id": result.run_id, "success": result.success}), flush=True)


def settings_file(settings: Settings, path) -> str:
    """Write ``settings`` where a shard process reads them."""
    fields = dataclasses.asdict(settings)
    fields["layouts"] = list(fields["layouts"])
    path.write_text(json.dumps(fields))
    return str(path)


if __name__ == "__main__":
    main()
