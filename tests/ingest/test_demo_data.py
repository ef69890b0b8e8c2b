"""The demo generator: deterministic for a seed, and realistic enough to exercise every stage."""

import json
import re
from datetime import UTC, date, datetime

import pytest

from pipelines.demo import day_objects, generate, stores
from pipelines.demo.people import population
from pipelines.record.canonical import request_sha256
from pipelines.resources.object_store import decompress
from pipelines.rot.render import render_template

DAY = date(2026, 11, 29)


@pytest.fixture(scope="module")
def day():
    objects, calls, sessions = day_objects(DAY, 3000, 11, population(11))
    docs, events = [], []
    for key, data in objects.items():
        lines = data.splitlines() if key.endswith((".jsonl", ".jsonl.gz", ".jsonl.zst")) else [data]
        (events if "/agent/" in key else docs).extend(json.loads(line) for line in lines)
    return objects, calls, sessions, docs, events


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a = generate(str(tmp_path / "a"), 300, 2, 4, DAY)
    b = generate(str(tmp_path / "b"), 300, 2, 4, DAY)
    generate(str(tmp_path / "c"), 300, 2, 5, DAY)
    files = lambda root: {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}  # noqa: E731
    assert files(tmp_path / "a") == files(tmp_path / "b")
    assert files(tmp_path / "a") != files(tmp_path / "c")
    assert a.calls == b.calls and a.days == [date(2026, 11, 28), DAY]
    # adding a day does not change the days already generated
    d = generate(str(tmp_path / "d"), 300, 3, 4, DAY)
    assert {k: v for k, v in files(tmp_path / "d").items() if "/28/" in k or "day=28" in k} == {
        k: v for k, v in files(tmp_path / "a").items() if "/28/" in k or "day=28" in k
    }
    assert d.calls > a.calls


def test_both_layouts_every_compression_and_both_apps(day):
    objects, calls, sessions, docs, events = day
    keys = list(objects)
    assert any(k.startswith("2026/11/29/support/") and k.endswith(".jsonl.gz") for k in keys)
    assert any(k.endswith(".jsonl.zst") for k in keys) and any(k.endswith(".json") for k in keys)
    assert any(k.startswith("year=2026/month=11/day=29/agent/") for k in keys)
    assert len(docs) + sum(e["event_type"] == "llm.call" for e in events) == calls
    assert sum(e["event_type"] == "session.start" for e in events) == sessions
    assert {"session.start", "llm.call", "tool.invoke", "agent.think", "state.mutate", "session.end"} == {
        e["event_type"] for e in events
    }


def test_the_traffic_production_has(day):
    _, calls, _, docs, events = day
    n = len(docs)
    share = lambda pred: sum(1 for d in docs if pred(d)) / n  # noqa: E731
    assert 0.01 < share(lambda d: "error" in d) < 0.04
    assert 0.015 < share(lambda d: d.get("response", {}).get("stop_reason") == "max_tokens") < 0.05
    assert 0.03 < share(lambda d: (d.get("feedback") or {}).get("value") == "down") < 0.08
    assert share(lambda d: d["latency_ms"] > 10_000) > 0.005
    assert share(lambda d: (d.get("cost_usd") or 0) > 0.5) > 0
    assert 0.05 < share(lambda d: d["segment"]["user_tier"] == "vip") < 0.3
    assert 0.2 < share(lambda d: d["segment"]["language"] == "pt-BR") < 0.6
    assert share(lambda d: d.get("escalated")) > 0 and share(lambda d: d.get("guardrail_hit")) > 0
    assert share(lambda d: (d.get("eval_score") or 5) < 3) > 0
    assert share(lambda d: d.get("prompt") is None) > 0  # the legacy path with no template version
    assert {d["prompt"]["version"] for d in docs if d.get("prompt") and d["service"] == "support.answer"} == {
        "v1",
        "v2",
        "v3",
    }
    tool_errors = [e for e in events if e["event_type"] == "tool.invoke" and e["payload"].get("is_error")]
    assert tool_errors


def test_planted_personal_data(day):
    _, _, _, docs, events = day
    text = json.dumps(docs, ensure_ascii=False) + json.dumps(events, ensure_ascii=False)
    assert re.search(r"[\w.+-]+@[\w-]+\.[\w.]+", text)  # emails
    assert re.search(r"\d{3}\.\d{3}\.\d{3}-\d{2}", text)  # CPF
    assert re.search(r"\d{2}\.\d{3}\.\d{3}/\d{4}-\d{2}", text)  # CNPJ
    assert re.search(r"\b\d{3}-\d{2}-\d{4}\b", text)  # SSN
    assert re.search(r"\b(?:\d{4} ){3}\d{4}\b", text)  # card numbers
    assert re.search(r"\(\d{2}\) ?9?\d{4}[- ]?\d{4}|\+55", text)  # Brazilian phones


def test_traces_were_rendered_from_the_capture_time_stores(day):
    _, _, _, docs, _ = day
    capture = stores.capture_time_stores()
    answers = [d for d in docs if d.get("prompt") and d["prompt"]["template_id"] == stores.SUPPORT_TEMPLATE]
    for doc in answers:
        documents = [
            {"doc_id": i, "text": t, "score": s}
            for i, t, s in zip(
                doc["retrieval"]["doc_ids"], doc["retrieval"]["texts"], doc["retrieval"]["scores"], strict=True
            )
        ]
        template = capture.templates[stores.SUPPORT_TEMPLATE][doc["prompt"]["version"]]
        system = render_template(template, doc["prompt"]["variables"], documents, clock=datetime.now(UTC))
        assert system == doc["request"]["system"]
    matches = [request_sha256(d["request"]) == d["rendered_request_sha256"] for d in docs]
    # a few applications logged other bytes than they sent: the demo plants that too
    assert 0.99 < sum(matches) / len(matches) < 1.0


def test_stores_age_the_way_life_does():
    capture, aged = stores.capture_time_stores(), stores.aged_stores(moved_on=date(2026, 11, 30))
    assert capture.templates[stores.SUPPORT_TEMPLATE]["v2"] != aged.templates[stores.SUPPORT_TEMPLATE]["v2"]
    assert capture.templates[stores.SUPPORT_TEMPLATE]["v3"] == aged.templates[stores.SUPPORT_TEMPLATE]["v3"]
    kb = aged.snapshots[aged.current_snapshot]
    assert (
        stores.DELETED_DOC not in kb
        and kb[stores.CHANGED_DOC] != capture.snapshots[stores.KB_SNAPSHOT][stores.CHANGED_DOC]
    )
    assert aged.resolve(stores.AGENT_ALIAS, date(2026, 12, 1)) != capture.resolve(stores.AGENT_ALIAS, DAY)
    assert aged.resolve(stores.AGENT_ALIAS, DAY) == capture.resolve(stores.AGENT_ALIAS, DAY)
    assert "now()" in capture.templates[stores.TRIAGE_TEMPLATE]["v1"]


def test_objects_decompress_as_their_keys_say(tmp_path):
    generate(str(tmp_path), 100, 1, 1, DAY)
    for path in tmp_path.rglob("*.*"):
        data = decompress(path.name, path.read_bytes())
        assert data.strip()[:1] in (b"{", b"[")


def test_every_small_day_gives_the_state_validator_a_late_write():
    """A session that writes after it ended (the state validator's finding) on every day, however
    few its sessions: tables/test_conformance reads a 300-call demo day of whatever date it runs."""
    people = population(7)
    for offset in range(7):
        objects, _, _ = day_objects(date(2026, 12, 1 + offset), 300, 7, people)
        events = [json.loads(line) for key, data in objects.items() if "/agent/" in key for line in data.splitlines()]
        ended = {e["trace_id"]: e["step_index"] for e in events if e["event_type"] == "session.end"}
        late = [
            e
            for e in events
            if e["event_type"] == "state.mutate" and e["step_index"] > ended.get(e["trace_id"], float("inf"))
        ]
        assert late, f"no session of the 300-call day {date(2026, 12, 1 + offset)} writes after it ended"
