"""Which calls of a day a candidate replays: stratified by segment.

A segment is service x language x user tier x input-length bucket. Each stratum
contributes up to ``per_stratum`` calls, chosen by a hash of (candidate, day,
call id): the same day and candidate always pick the same calls, so a re-run
sends nothing new. Each chosen call carries its inclusion probability
(chosen / calls in its stratum); the summary's aggregate weights every call by
its inverse, so a stratum sampled at 1 in 10 counts ten times.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipelines.record.canonical import sha256_hex

# input-token bucket bounds: < SHORT is short, >= LONG is long
SHORT_TOKENS = 250
LONG_TOKENS = 500
SEGMENT_FIELDS = ("service", "language", "user_tier", "length")


def input_tokens(call: Mapping[str, Any]) -> int:
    """The call's input tokens as billed (uncached + cache read + cache write), else
    estimated from the recorded request (4 characters a token)."""
    usage = call.get("usage") or {}
    billed = sum(usage.get(k) or 0 for k in ("input_tokens", "cache_read_input_tokens", "cache_write_input_tokens"))
    if billed:
        return billed
    return len(call.get("request_json") or "") // 4


def length_bucket(tokens: int) -> str:
    return "short" if tokens < SHORT_TOKENS else ("long" if tokens >= LONG_TOKENS else "medium")


def as_mapping(value: Any) -> dict[str, Any]:
    """A map column as a dict: Arrow maps come back from polars as [{key, value}, ...]."""
    if not value:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    return {item["key"]: item["value"] for item in value} if isinstance(value[0], Mapping) else dict(value)


def segment_of(call: Mapping[str, Any]) -> dict[str, str]:
    seg = as_mapping(call.get("segment"))
    return {
        "service": call.get("service") or "unknown",
        "language": seg.get("language") or "unknown",
        "user_tier": seg.get("user_tier") or "unknown",
        "length": length_bucket(input_tokens(call)),
    }


def segment_key(segment: Mapping[str, str]) -> str:
    return "/".join(segment[f] for f in SEGMENT_FIELDS)


@dataclass(frozen=True)
class Sampled:
    call: dict[str, Any]
    segment: dict[str, str]
    segment_key: str
    inclusion_probability: float


def stratified_sample(calls: Iterable[dict[str, Any]], per_stratum: int, salt: str) -> list[Sampled]:
    strata: dict[str, list[tuple[dict[str, Any], dict[str, str]]]] = defaultdict(list)
    for call in calls:
        segment = segment_of(call)
        strata[segment_key(segment)].append((call, segment))
    chosen: list[Sampled] = []
    for key in sorted(strata):
        members = sorted(strata[key], key=lambda cs: sha256_hex(f"{salt}|{cs[0]['call_id']}"))
        take = members[:per_stratum]
        probability = len(take) / len(members)
        chosen.extend(Sampled(call, segment, key, probability) for call, segment in take)
    return chosen


def segment_json(segment: Mapping[str, str]) -> str:
    return json.dumps(dict(segment), sort_keys=True)
