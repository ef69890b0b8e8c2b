"""Sharded days: which shard of a day a source object belongs to, and when a day's shards are all in.

A day too big for one process is split by object into shards, each ingested by
its own run. How is configured per source (``ObjectStore.shards``, from
``TRACELAKE_SHARDS``):

- ``1`` (the default): one run holds the whole day, as before;
- ``hour:N``: by the hour in the key after its date (``.../03-000.jsonl.gz``,
  ``.../14/...``, ``hour=07/``), N shards of contiguous hours (N <= 24), or, for
  N a multiple of 24, N/24 shards of each hour (by the hash of the key inside it);
  a key that carries no hour goes by the hash of its key. `calls` and `spans` are
  laid out by hour too (``schema.PARTITIONS``): a shard's merge reads only its hours;
- ``hash:N``: by a stable hash of the key (sha256), for layouts without hours.

Every key belongs to exactly one shard, computed from the key alone, so any
process agrees on it. Dagster keeps one partitions definition per job, and the
nightly job holds every daily stage, so the shard is not a partition dimension
but two run tags (``tracelake/sharding``, ``tracelake/shard``) on runs of the
day's partition; ``day_complete`` says when the daily stages may follow.
No Dagster here.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from pipelines.record.draws import stable_int

SHARDING_TAG = "tracelake/sharding"
SHARD_TAG = "tracelake/shard"
# set on the shard runs the nightly fan-out launches: their day then gets the whole nightly run
NIGHTLY_TAG = "tracelake/nightly"
MODES = ("hour", "hash")
HOURS = 24
# an hour as its own path segment or the start of a file name: "03-000.jsonl", "14/", "hour=07/"
HOUR_IN_KEY = re.compile(r"(?:^|/)(?:hour=|hh=|h=)?([01]\d|2[0-3])(?=[-_./]|$)")
# A Langfuse export run's files (observations, scores, manifest) join and wait for each other
# (formats/langfuse_export.py): they go to one shard, by the run's root and timestamp.
EXPORT_RUN = re.compile(
    r"^(?P<root>.*/)(?:observations_v2|scores|manifests)/(?P<ts>\d{4}-\d{2}-\d{2}T(?P<hh>\d{2})[^/]*)$"
)


@dataclass(frozen=True)
class ShardSpec:
    """How a source's days are split: ``mode`` (hour or hash) into ``count`` shards."""

    mode: str = "hash"
    count: int = 1

    @classmethod
    def parse(cls, text: str | None) -> ShardSpec:
        """``"1"``, ``"hour:4"``, ``"hash:8"`` (``TRACELAKE_SHARDS``) -> a spec."""
        text = (text or "1").strip().lower()
        if text.isdigit() and int(text) == 1:
            return cls()
        mode, _, count = text.partition(":")
        if mode not in MODES or not count.strip().isdigit() or int(count) < 1:
            raise ValueError(
                f"TRACELAKE_SHARDS={text!r}: expected 1 (unsharded), hour:N (1 <= N <= 24) or hash:N (N >= 1)"
            )
        if mode == "hour" and int(count) > HOURS and int(count) % HOURS:
            raise ValueError(
                f"TRACELAKE_SHARDS={text!r}: a day has 24 hours; use hour:N with N <= 24, or a multiple of 24 "
                "(that many shards of each hour), or hash:N"
            )
        return cls(mode, int(count))

    @property
    def sharded(self) -> bool:
        return self.count > 1

    def __str__(self) -> str:
        return f"{self.mode}:{self.count}" if self.sharded else "1"

    def shard_of(self, key: str, after_date: str | None = None) -> int:
        """The shard of ``key``; ``after_date`` is the part of the key after its date
        (where an hour is looked for; default the whole key)."""
        if not self.sharded:
            return 0
        run = EXPORT_RUN.match(key)
        if self.mode == "hour":
            hour = int(run["hh"]) if run else hour_of(key if after_date is None else after_date)
            if hour is not None and hour < HOURS and self.count <= HOURS:
                return hour * self.count // HOURS
            if hour is not None and hour < HOURS:
                per_hour = self.count // HOURS
                return hour * per_hour + key_hash(export_run(run) if run else key) % per_hour
        return key_hash(export_run(run) if run else key) % self.count

    def hours_of(self, shard: int) -> range:
        """The hours an hour shard covers (keys without an hour come by hash on top)."""
        if self.count > HOURS:
            hour = shard // (self.count // HOURS)
            return range(hour, hour + 1)
        return range(-(-shard * HOURS // self.count), -(-(shard + 1) * HOURS // self.count))


def hour_of(text: str) -> int | None:
    """The first hour found in ``text`` (a key after its date), or None."""
    found = HOUR_IN_KEY.search(text)
    return int(found.group(1)) if found else None


def export_run(run: re.Match[str]) -> str:
    """One export run's identity: its root and its file names' timestamp without extension."""
    stem = run["ts"]
    for extension in (".json", ".parquet", ".csv"):
        stem = stem.split(extension)[0]
    return run["root"] + stem


def key_hash(key: str) -> int:
    """A stable 64-bit hash of the key: the same in every process and release."""
    return stable_int(key)


def shard_tags(spec: ShardSpec, shard: int, nightly_day: str | None = None) -> dict[str, str]:
    """The run tags of one shard's run."""
    if not 0 <= shard < spec.count:
        raise ValueError(f"shard {shard} is outside {spec} (shards 0..{spec.count - 1})")
    tags = {SHARDING_TAG: str(spec), SHARD_TAG: str(shard)}
    if nightly_day:
        tags[NIGHTLY_TAG] = nightly_day
    return tags


def shard_from_tags(tags: Mapping[str, str], configured: ShardSpec) -> int | None:
    """The shard a run is for (None: the whole day). A run launched for another
    sharding than the source's is refused: its shard would mean other objects."""
    if SHARD_TAG not in tags:
        return None
    launched = ShardSpec.parse(tags.get(SHARDING_TAG))
    if launched != configured:
        raise ValueError(
            f"this run is shard {tags[SHARD_TAG]} of sharding {launched}, but the source is configured as "
            f"{configured} (TRACELAKE_SHARDS): relaunch the day's shards under the current setting"
        )
    shard = int(tags[SHARD_TAG])
    shard_tags(configured, shard)  # in range
    return shard


@dataclass(frozen=True)
class ShardRun:
    """The latest run of one shard of a day: its id, whether it is done, failed or
    still going, and whether the nightly fan-out launched it."""

    shard: int
    run_id: str
    state: str  # "succeeded", "failed" or "running"
    nightly: bool = False


def day_complete(spec: ShardSpec, latest: Mapping[int, ShardRun]) -> bool:
    """Every shard of the day has a run and each one's latest run succeeded."""
    return all(shard in latest and latest[shard].state == "succeeded" for shard in range(spec.count))


def missing_shards(spec: ShardSpec, latest: Mapping[int, ShardRun]) -> list[int]:
    """The shards whose latest run has not (yet) succeeded, for the sensor's skip reason."""
    return [s for s in range(spec.count) if s not in latest or latest[s].state != "succeeded"]


def stages_to_launch(spec: ShardSpec, latest: Mapping[int, ShardRun], nightly_done: set[int]) -> list[str]:
    """What follows the load of a day: nothing until every shard's latest run succeeded;
    then ``nightly`` once every shard has had a successful run of the nightly fan-out
    (the run key makes it once a day), and ``ingest`` (traces and the checks) when a
    latest run came from elsewhere (objects that changed, a shard run by hand)."""
    if not day_complete(spec, latest):
        return []
    stages = ["nightly"] if nightly_done >= set(range(spec.count)) else []
    if not all(run.nightly for run in latest.values()):
        stages.append("ingest")
    return stages


def landed_key(latest: Mapping[int, ShardRun]) -> str:
    """A digest of which run landed each shard: the daily stages run once per such set."""
    text = ",".join(f"{s}={latest[s].run_id}" for s in sorted(latest))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
