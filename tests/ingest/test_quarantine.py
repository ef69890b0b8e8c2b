"""Nothing lost: a fixture set of corrupted objects and records is exactly accounted for in
quarantine and ingest_log, and the valid records beside them are ingested."""

import gzip
import json

import polars as pl
import pytest
import zstandard

from tests.environments import local_settings, run_stage

DAY = "2026-11-29"
PII = "joao.pereira@example.com.br"


def _frozen(trace_id: str, **extra) -> dict:
    return {
        "format": "tracelake.frozen_call",
        "version": 1,
        "trace_id": trace_id,
        "occurred_at": "2026-11-29T12:00:00Z",
        "model": {"id": "claude-haiku-4-5-20251001"},
        "request": {
            "model": "claude-haiku-4-5-20251001",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": f"my email is {PII}"}],
        },
        **extra,
    }


def _event(event_id: str, event_type: str = "agent.think", **extra) -> dict:
    return {
        "event_id": event_id,
        "session_id": "s",
        "trace_id": "t-agent",
        "step_index": 0,
        "timestamp": "2026-11-29T12:00:00Z",
        "event_type": event_type,
        "payload": {"text": PII},
        **extra,
    }


def _lines(*records) -> bytes:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records).encode()


# key -> (bytes, records expected read, ingested, quarantined, status)
FIXTURES = {
    "good.jsonl": (_lines(_frozen("t1"), _frozen("t2")), 2, 2, 0, "ok"),
    "mixed.jsonl.gz": (
        gzip.compress(
            _lines(
                _frozen("t3"),
                '{"format": "tracelake.frozen_call", "trace_id": "t4", ' + f'"note": "{PII}"',  # invalid JSON line
                _frozen("t5", latency_ms="slow"),  # wrong type
                {k: v for k, v in _frozen("t6").items() if k != "trace_id"},  # missing id
                _frozen("t7"),
            )
        ),
        5,
        2,
        3,
        "partial",
    ),
    "events.jsonl.zst": (
        zstandard.ZstdCompressor().compress(
            _lines(
                _event("e1"),
                _event("e2", "agent.sleep"),
                _event("", "agent.think"),
                _event("e4"),
                "x" * 9_000_000,  # an oversized line
            )
        ),
        5,
        2,
        3,
        "partial",
    ),
    # the break falls inside the first line: that line is read and quarantined (tests/ingest/test_faults.py
    # covers breaks after complete lines)
    "truncated.jsonl.gz": (gzip.compress(_lines(_frozen("t8"), _frozen("t9")))[:-30], 1, 0, 1, "failed"),
    "not-json.json": (b"<html>503 Service Unavailable</html>", 0, 0, 0, "failed"),
    "unknown.json": (json.dumps({"hello": "world"}).encode(), 0, 0, 0, "failed"),
}


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quarantine")
    settings = local_settings(tmp)
    folder = tmp / "source" / "2026" / "11" / "29"
    folder.mkdir(parents=True)
    for key, (data, *_) in FIXTURES.items():
        (folder / key).write_bytes(data)
    result = run_stage(settings, "ingest", DAY, raise_on_error=False)
    return settings, result


def test_the_valid_records_are_ingested(ingested):
    settings, result = ingested
    warehouse = settings.warehouse()
    assert sorted(warehouse.read("calls")["trace_id"].to_list()) == ["t1", "t2", "t3", "t7"]
    assert warehouse.read("spans").filter(pl.col("source_format") == "agent_events").height == 2


def test_every_object_is_accounted_for_in_ingest_log(ingested):
    settings, _ = ingested
    log = settings.warehouse().read("ingest_log")
    assert log.height == len(FIXTURES)
    for key, (_, read, ok, bad, status) in FIXTURES.items():
        row = log.filter(pl.col("source_key").str.ends_with(key)).row(0, named=True)
        assert (row["records_read"], row["records_ingested"], row["records_quarantined"], row["status"]) == (
            read,
            ok,
            bad,
            status,
        ), key
        assert row["records_read"] == row["records_ingested"] + row["records_quarantined"]


def test_quarantine_points_at_each_bad_record_and_object(ingested):
    settings, _ = ingested
    q = settings.warehouse().read("quarantine")
    found = {(row["source_key"].rsplit("/", 1)[1], row["line"], row["error_class"]) for row in q.iter_rows(named=True)}
    assert found == {
        ("mixed.jsonl.gz", 2, "invalid_json"),
        ("mixed.jsonl.gz", 3, "invalid_record"),
        ("mixed.jsonl.gz", 4, "invalid_record"),
        ("events.jsonl.zst", 2, "invalid_record"),
        ("events.jsonl.zst", 3, "invalid_record"),
        ("events.jsonl.zst", 5, "oversized_record"),
        ("truncated.jsonl.gz", None, "corrupt_object"),
        ("truncated.jsonl.gz", 1, "corrupt_object"),
        ("not-json.json", None, "invalid_json"),
        ("unknown.json", None, "unknown_format"),
    }
    names = q["source_key"].str.split("/").list.last()
    messages = {(name, line): message for name, line, message in zip(names, q["line"], q["message"], strict=True)}
    assert "latency_ms" in messages[("mixed.jsonl.gz", 3)]
    assert "trace_id" in messages[("mixed.jsonl.gz", 4)]
    assert "event_type" in messages[("events.jsonl.zst", 2)]
    assert "gzip" in messages[("truncated.jsonl.gz", None)]
    # quarantine points at records; it never copies their text
    assert not q.select(pl.any_horizontal(pl.col(pl.String).str.contains(PII, literal=True))).to_series().any()
    assert set(q["scope"]) == {"record", "object"}


def test_quality_checks_pass_on_what_was_kept(ingested):
    _, result = ingested
    assert result.success
    evaluations = result.get_asset_check_evaluations()
    assert {e.check_name for e in evaluations} >= {"calls_quality", "ingest_log_quality", "quarantine_quality"}
    assert all(e.passed for e in evaluations)
