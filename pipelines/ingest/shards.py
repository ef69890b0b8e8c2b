"""Sharded days: which shard of a day a source object belongs to.

A day too big for one process is split by object into shards, each ingested by
its own run. How is configured per source (``ObjectStore.shards``, from
``TRACELAKE_SHARDS``):

- ``1`` (the default): one shard holds the whole day;
- ``hour:N``: by the hour in the key after its date (``.../03-000.jsonl.gz``,
  ``.../14/...``, ``hour=07/``), N shards of contiguous hours (N <= 24), or, for
  N a multiple of 24, N/24 shards of each hour (by the hash of the key inside it);
  a key that carries no hour goes by the hash of its key. `calls` and `spans` are
  laid out by hour too (``schema.PARTITIONS``): a shard's merge reads only its hours;
- ``hash:N``: by a stable hash of the key (sha256), for layouts without hours.

Every key belongs to exactly one shard, computed from the key alone, so any
process agrees on it. A shard's name (``ShardSpec.keys``) is the shard dimension's
partition key (pipelines/partitions.py); it names the rule too, so the shards of
another setting are other partitions. No Dagster here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipelines.record.draws import stable_int

MODES = ("hour", "hash")
# the one shard of an unsharded day
WHOLE_DAY = "all"
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

    def keys(self) -> list[str]:
        """The shards' names, in order: ``all`` for an unsharded day, else ``hour4-0`` .. ``hour4-3``."""
        if not self.sharded:
            return [WHOLE_DAY]
        return [f"{self.mode}{self.count}-{shard}" for shard in range(self.count)]

    def shard_named(self, key: str) -> int:
        """The shard a name (``keys``) stands for; a name of another setting is refused:
        its shard would mean other objects."""
        names = self.keys()
        if key not in names:
            raise ValueError(
                f"shard {key!r} is not a shard of {self} (TRACELAKE_SHARDS), whose shards are "
                f"{', '.join(names[:3])}{' ...' if len(names) > 3 else ''}: launch the day's current shards instead"
            )
        return names.index(key)

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
