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
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipelines.record.canonical import sha256_hex

# Input-length buckets, in content tokens: the call's own input (the customer's
# turns plus retrieved document texts, 4 characters a token), not the prompt
# template, so a call stays in its segment whichever template version rendered it
# and whichever a candidate brings.
LONG_TOKENS = 85
VERY_LONG_TOKENS = 1000
SEGMENT_FIELDS = ("service", "language", "user_tier", "length")
CHARS_PER_TOKEN = 4
JOIN = "\n"


def _tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def content_tokens(call: Mapping[str, Any]) -> int:
    """The customer's turns (their text parts) plus each retrieved document's text."""
    said = [
        part.get("text") or ""
        for message in call.get("messages") or []
        if message.get("role") == "user"
        for part in message.get("parts") or []
        if part.get("type") == "text"
    ]
    documents = (call.get("retrieval") or {}).get("documents") or []
    return _tokens(JOIN.join(said)) + sum(_tokens(d.get("text") or "") for d in documents)


def length_bucket(tokens: int) -> str:
    return "short" if tokens < LONG_TOKENS else ("long" if tokens < VERY_LONG_TOKENS else "very_long")


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
        "length": length_bucket(content_tokens(call)),
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
