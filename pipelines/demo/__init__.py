"""Realistic synthetic traces for demos, tests and benchmarks.

``generate`` writes, for each day, what two production applications would
have logged: the support assistant's frozen-call JSON (batched JSONL.gz per
hour, triage calls as JSONL.zst, escalations as single pretty-printed JSON)
under ``YYYY/MM/DD/``, and the orders agent's event logs (JSONL) under Hive
``year=/month=/day=/``. It also writes the ingredient stores the prompts were
rendered from, as they are today (after the changes described in
``pipelines.demo.stores``).

Output depends only on (seed, calls, days, end): each day has its own random
stream, so adding days never changes the ones already generated.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pipelines.demo import agent, kb, stores, support, verify
from pipelines.demo.objects import ObjectWriter
from pipelines.demo.people import Customer, population

# Share of a day's calls by route; agent sessions make ~2.7 calls each.
ANSWER_SHARE, TRIAGE_SHARE = 0.65, 0.10
CALLS_PER_SESSION = 2.7
OBJECT_CALLS = 250
# UTC traffic by hour: quiet nights, a peak in the afternoon
HOURLY = [2, 1, 1, 1, 1, 2, 3, 5, 7, 8, 9, 9, 9, 10, 10, 10, 9, 8, 7, 6, 5, 4, 3, 2]


@dataclass
class DemoSummary:
    days: list[date] = field(default_factory=list)
    objects: int = 0
    bytes_written: int = 0
    calls: int = 0
    sessions: int = 0
    source: str = ""
    stores: str = ""


def _when(rng: random.Random, day: date) -> datetime:
    hour = rng.choices(range(24), HOURLY)[0]
    start = datetime(day.year, day.month, day.day, hour, tzinfo=UTC)
    return start + timedelta(seconds=rng.uniform(0, 3600))


def _customer(rng: random.Random, people: list[Customer]) -> Customer:
    return people[int(rng.paretovariate(1.2) * 7) % len(people)]


def _jsonl(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records).encode()


def _own_stream_route(
    objects: dict[str, bytes],
    name: str,
    make: Callable[[random.Random, Customer, datetime, str], dict],
    calls: int,
    day: date,
    seed: int,
    people: list[Customer],
) -> int:
    """``calls`` calls of a route drawn from the route's own random stream, as ``YYYY/MM/DD/<name>/HH.jsonl.gz``."""
    rng = random.Random(f"{seed}:{day.isoformat()}:{name}")
    by_hour: dict[int, list[dict]] = defaultdict(list)
    for _ in range(calls):
        when = _when(rng, day)
        by_hour[when.hour].append(make(rng, _customer(rng, people), when, f"{rng.getrandbits(128):032x}"))
    for hour, docs in sorted(by_hour.items()):
        docs.sort(key=lambda d: d["occurred_at"])
        objects[f"{day:%Y/%m/%d}/{name}/{hour:02d}.jsonl.gz"] = _jsonl(docs)
    return calls


def day_objects(
    day: date,
    calls: int,
    seed: int,
    people: list[Customer],
    per_call_values: bool = True,
    long_prompt_calls: int = 0,
    verify_calls: int = 0,
) -> tuple[dict[str, bytes], int, int]:
    """Every object one day produces (key -> uncompressed bytes), with the
    number of model calls and agent sessions in them. ``per_call_values=False``
    renders from templates that print no retrieval score and no date;
    ``long_prompt_calls`` adds that many support.kb calls (``pipelines/demo/kb.py``),
    ``verify_calls`` that many account.verify calls (``pipelines/demo/verify.py``)."""
    rng = random.Random(f"{seed}:{day.isoformat()}")
    answers: dict[int, list[dict]] = defaultdict(list)
    triage: dict[int, list[dict]] = defaultdict(list)
    sessions: dict[int, list[list[dict]]] = defaultdict(list)
    singles: list[dict] = []
    for _ in range(round(calls * ANSWER_SHARE)):
        when = _when(rng, day)
        doc = support.answer_call(rng, _customer(rng, people), when, f"{rng.getrandbits(128):032x}", per_call_values)
        (singles if doc.get("escalated") else answers[when.hour]).append(doc)
    for _ in range(round(calls * TRIAGE_SHARE)):
        when = _when(rng, day)
        customer = _customer(rng, people)  # before the trace id: the demo's draws stay in order
        trace_id = f"{rng.getrandbits(128):032x}"
        triage[when.hour].append(support.triage_call(rng, customer, when, trace_id, per_call_values))
    agent_calls = calls - round(calls * ANSWER_SHARE) - round(calls * TRIAGE_SHARE)
    made = round(calls * ANSWER_SHARE) + round(calls * TRIAGE_SHARE)
    session_count = max(1, round(agent_calls / CALLS_PER_SESSION)) if agent_calls > 0 else 0
    for n in range(session_count):
        when = _when(rng, day)
        customer = _customer(rng, people)  # before the trace id: the demo's draws stay in order
        trace_id = f"{rng.getrandbits(128):032x}"
        # the day's first session always writes after it ended (besides the hashed 2%): a small day
        # still gives the state validator something to find, whatever its date
        events = agent.session_events(rng, customer, when, trace_id, late_write=n == 0)
        made += sum(e["event_type"] == "llm.call" for e in events)
        sessions[when.hour].append(events)

    ymd = f"{day:%Y/%m/%d}"
    hive = f"year={day:%Y}/month={day:%m}/day={day:%d}"
    objects: dict[str, bytes] = {}
    for hour, docs in sorted(answers.items()):
        docs.sort(key=lambda d: d["occurred_at"])
        for i in range(0, len(docs), OBJECT_CALLS):
            objects[f"{ymd}/support/{hour:02d}-{i // OBJECT_CALLS:03d}.jsonl.gz"] = _jsonl(docs[i : i + OBJECT_CALLS])
    for hour, docs in sorted(triage.items()):
        docs.sort(key=lambda d: d["occurred_at"])
        objects[f"{ymd}/triage/{hour:02d}.jsonl.zst"] = _jsonl(docs)
    for doc in singles:
        objects[f"{ymd}/escalations/{doc['trace_id']}.json"] = json.dumps(doc, ensure_ascii=False, indent=2).encode()
    # the long-prompt and identity-check routes draw from their own streams: the objects above do not change
    made += _own_stream_route(objects, "kb", kb.kb_call, long_prompt_calls, day, seed, people)
    made += _own_stream_route(objects, "verify", verify.verify_call, verify_calls, day, seed, people)
    for hour, hour_sessions in sorted(sessions.items()):
        hour_sessions.sort(key=lambda events: events[0]["timestamp"])
        per_object = max(1, OBJECT_CALLS // 7)
        for i in range(0, len(hour_sessions), per_object):
            lines = [e for events in hour_sessions[i : i + per_object] for e in events]
            objects[f"{hive}/agent/{hour:02d}-{i // per_object:03d}.jsonl"] = _jsonl(lines)
    return objects, made, session_count


def generate(
    out: str,
    calls: int,
    days: int,
    seed: int,
    end: date,
    stores_out: str | None = None,
    endpoint_url: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    per_call_values: bool = True,
    long_prompt_calls: int = 0,
    verify_calls: int = 0,
) -> DemoSummary:
    """Write ``days`` days ending on ``end`` (inclusive) of about ``calls``
    calls each (agent sessions vary in length, so the count is approximate)."""
    people = population(seed)
    writer = ObjectWriter(out, endpoint_url)
    summary = DemoSummary(source=out, stores=stores_out or "")
    day_list = [end - timedelta(days=i) for i in reversed(range(days))]
    for n, day in enumerate(day_list, start=1):
        objects, made, session_count = day_objects(
            day, calls, seed, people, per_call_values, long_prompt_calls, verify_calls
        )
        for key, data in objects.items():
            summary.bytes_written += writer.put(key, data)
        summary.objects += len(objects)
        summary.calls += made
        summary.sessions += session_count
        summary.days.append(day)
        if progress:
            progress(day.isoformat(), n, len(day_list))
    if stores_out:
        store_writer = ObjectWriter(stores_out, endpoint_url)
        for key, data in stores.aged_stores(end + timedelta(days=1), per_call_values).files().items():
            store_writer.put(key, data)
    return summary
