"""Partitions: every stage is daily (UTC). Today is a partition too, so the
sensor can ingest objects as they land; the nightly schedule targets yesterday.
The first day is ``TRACELAKE_START_DATE`` (settings.start_date): by default the
first day a ``tracelake demo`` fills."""

from __future__ import annotations

from datetime import date

import dagster as dg

from pipelines.ingest.shards import ShardSpec, shard_from_tags
from pipelines.settings import start_date

START_DATE = start_date()

daily = dg.DailyPartitionsDefinition(start_date=START_DATE, timezone="UTC", end_offset=1)


def day_of(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext) -> date:
    """The partition's day."""
    return date.fromisoformat(context.partition_key)


def day_and_shard(context: dg.AssetExecutionContext, spec: ShardSpec) -> tuple[date, int | None]:
    """The partition's day, and the shard of it this run ingests (None: all of it).

    The shard is the second dimension of ingest, carried by run tags rather than a
    multi-partition: Dagster allows one partitions definition per job, and the
    nightly job runs the daily stages after ingest (see pipelines/ingest/shards.py)."""
    return day_of(context), shard_from_tags(context.run.tags, spec)


# Replay candidates: a dynamic dimension whose keys are the registry's slugs
# (synced by the candidate sensor). Dynamic partition names are instance-global,
# hence the namespace.
CANDIDATE_PARTITIONS = "tracelake_candidate"
candidates = dg.DynamicPartitionsDefinition(name=CANDIDATE_PARTITIONS)
candidate_days = dg.MultiPartitionsDefinition({"candidate": candidates, "day": daily})


def candidate_day_key(candidate: str, day: date | str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"candidate": candidate, "day": str(day)})


def candidate_day_of(context: dg.AssetExecutionContext) -> tuple[str, date]:
    """(candidate slug, day) of a candidate x day partition."""
    key = context.partition_key
    if not isinstance(key, dg.MultiPartitionKey):
        key = candidate_days.get_partition_key_from_str(key)
    keys = key.keys_by_dimension
    return keys["candidate"], date.fromisoformat(keys["day"])
