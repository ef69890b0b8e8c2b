"""Demo traces with known contents, written next to the generated demo data:
a support call that no rule keeps and the sample misses (its text must be
swept), one kept by a thumbs-down (its text must stay), and a user with
support calls and an agent session (to erase). Strings planted in their text
let a test look for them in the bytes on disk."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from pipelines.demo import agent, support
from pipelines.demo.objects import ObjectWriter
from pipelines.demo.people import Customer
from pipelines.record.canonical import request_sha256
from pipelines.retention.decide import sample_point

SWEPT = "PLANTED-SWEPT-91c3e7"
KEPT = "PLANTED-KEPT-5be012"
ERASED_USER = "u-erase-me-4471"
ERASED_EMAIL = "erase.me.4471@example.org"

CUSTOMER = Customer(
    user_id="u-planted-0001",
    language="en",
    tier="free",
    name="Pat Planted",
    email="pat.planted@example.org",
    phone="+1 555 0100",
    card="4111 1111 1111 1111",
    tax_id="000-00-0000",
    company=None,
    address="1 Planted Way, Springfield",
)
ERASED = replace(CUSTOMER, user_id=ERASED_USER, name="Erin Erasable", email=ERASED_EMAIL, phone="+1 555 0199")


@dataclass(frozen=True)
class Planted:
    swept_trace: str
    kept_trace: str
    erased_traces: tuple[str, ...]


def _trace_id(prefix: str, sampled: bool) -> str:
    """A trace id the 10% sample misses (u >= 0.5), or any."""
    for i in range(1000):
        trace_id = f"{prefix}{i:04d}".ljust(32, "0")
        if sampled or sample_point(pl.Series([trace_id]), "")[0] >= 0.5:
            return trace_id
    raise AssertionError("no trace id found")


def _quiet_answer(customer: Customer, when: datetime, trace_id: str, planted: str) -> dict:
    """A support.answer call with nothing any rule keeps, and ``planted`` in its text."""
    for seed in range(100):
        doc = support.answer_call(random.Random(seed), customer, when, trace_id)
        if "response" in doc and doc.get("prompt"):
            break
    doc["request"]["messages"][0]["content"] = f"My parcel never arrived, please check. {planted}"
    doc["rendered_request_sha256"] = request_sha256(doc["request"])
    doc["response"]["content"][0]["text"] = f"I am sorry, {customer.name}. {planted}"
    doc["retrieval"]["query"] = f"parcel never arrived {planted}"
    for key in ("feedback", "eval_score"):
        doc.pop(key, None)
    doc.update(escalated=False, guardrail_hit=False, latency_ms=1200.0)
    doc["ended_at"] = (when + timedelta(milliseconds=1200)).isoformat()
    doc["response"]["usage"]["output_tokens"] = 40
    doc["cost_usd"] = 0.001
    return doc


def write_planted(source: str, day: date) -> Planted:
    """Write the planted objects for ``day`` under the demo source."""
    writer = ObjectWriter(source)
    noon = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    swept = _quiet_answer(CUSTOMER, noon, _trace_id("5eed", sampled=False), SWEPT)
    # a thumbs-down up front says the same as the rule; the comment is free text the sweep would remove
    kept = _quiet_answer(CUSTOMER, noon + timedelta(minutes=5), _trace_id("cafe", sampled=True), KEPT)
    kept["feedback"] = {"source": "user", "name": "thumbs", "value": "down", "comment": f"wrong {KEPT}"}
    erased = [
        _quiet_answer(ERASED, noon + timedelta(minutes=10 + i), _trace_id(f"e{i}a", sampled=True), f"hello {i}")
        for i in range(3)
    ]
    lines = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in [swept, kept, *erased]).encode()
    writer.put(f"{day:%Y/%m/%d}/support/planted.jsonl", lines)
    session_trace = "e5e55e55" * 4
    events = agent.session_events(random.Random(3), ERASED, noon + timedelta(hours=1), session_trace)
    writer.put(
        f"year={day:%Y}/month={day:%m}/day={day:%d}/agent/planted.jsonl",
        "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events).encode(),
    )
    return Planted(swept["trace_id"], kept["trace_id"], (*(d["trace_id"] for d in erased), session_trace))


def files_holding(root: Path, needle: str) -> list[str]:
    """Every file under ``root`` whose bytes, or whose decoded Parquet values,
    contain ``needle``. Decoding matters: Parquet pages are compressed (zstd
    after a compaction), so a string can be in a file without being in its bytes."""
    hits = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if needle.encode() in data:
            hits.append(str(path.relative_to(root)))
        elif path.suffix == ".parquet":
            values = json.dumps(pq.read_table(path).to_pylist(), default=str, ensure_ascii=False)
            if needle in values:
                hits.append(str(path.relative_to(root)))
    return hits
