"""Partitions: every stage is daily (UTC). Today is a partition too, so the
sensor can ingest objects as they land; the nightly schedule targets yesterday.
The first day is ``TRACELAKE_START_DATE`` (settings.start_date): by default the
first day a ``tracelake demo`` fills.

The raw-trace load is day x shard: the shard dimension is static, its keys the
shards of ``TRACELAKE_SHARDS`` (pipelines/ingest/shards.py; one key, ``all``, when days
are not sharded). The daily stages depend on every shard of their day
(``BY_DAY``)."""

from __future__ import annotations

import warnings
from datetime import date

import dagster as dg

from pipelines.ingest.shards import ShardSpec
from pipelines.settings import shard_spec, start_date

# The multi-partition mappings are beta in Dagster 1.13; dagster is pinned exactly.
warnings.filterwarnings(
    "ignore", message="Class `Multi.*PartitionMapping` is currently in beta", category=dg.BetaWarning
)

START_DATE = start_date()
SHARDS = shard_spec()

daily = dg.DailyPartitionsDefinition(start_date=START_DATE, timezone="UTC", end_offset=1)


def day_shards_of(spec: ShardSpec) -> dg.MultiPartitionsDefinition:
    """Day x shard: the shards of ``spec`` (``ShardSpec.keys``) as a static dimension."""
    return dg.MultiPartitionsDefinition({"day": daily, "shard": dg.StaticPartitionsDefinition(spec.keys())})


day_shards = day_shards_of(SHARDS)
# a day of a daily stage needs every shard of that day
BY_DAY = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="day")
# a candidate x day of replay needs every shard of that day
DAY_OF_CANDIDATE_DAY = dg.MultiPartitionMapping(
    {"day": dg.DimensionPartitionMapping(dimension_name="day", partition_mapping=dg.IdentityPartitionMapping())}
)


def day_of(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext) -> date:
    """The partition's day: a day, or the day of a day x shard key (a check of a loaded table
    runs in the shard's run when the UI materializes a shard: it checks the day as loaded so far)."""
    return date.fromisoformat(context.partition_key.split("|")[0])  # dimensions in name order: day, shard


def shard_keys(repository: dg.RepositoryDefinition) -> list[str]:
    """The shards of a day in these definitions (the ``load`` job's shard dimension)."""
    partitions = repository.get_job("load").partitions_def
    assert isinstance(partitions, dg.MultiPartitionsDefinition)
    return partitions.get_partitions_def_for_dimension("shard").get_partition_keys()


def day_shard_key(day: date | str, shard: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"day": str(day), "shard": shard})


def day_and_shard(context: dg.AssetExecutionContext, spec: ShardSpec) -> tuple[date, int]:
    """A day x shard partition's day, and the shard of the source's setting (``spec``)
    it names; a shard of another setting is refused (it would mean other objects)."""
    day, shard = context.partition_key.split("|")  # dimensions in name order: day, shard
    return date.fromisoformat(day), spec.shard_named(shard)


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
