"""One bad record never stops a day: JSON nested 10,000 deep, times at year 1
or 9999 or with offsets that overflow, a string where a number belongs in any
field of the request or usage, NaN and Infinity, duplicate keys, and one
record over the size limit inside a JSON array each end as a quarantine row
naming object, line and problem, while every good record beside them is
ingested. No message quotes a record's keys or values."""

import json

import polars as pl
import pytest

from pipelines.formats.base import MAX_RECORD_BYTES
from tests.environments import local_settings, run_stage

DAY = "2026-11-29"
SECRET = "ana.souza@example.com"  # planted in every bad record, as a value and as a key


def _frozen(trace_id: str, **changes) -> dict:
    doc = {
        "format": "tracelake.frozen_call",
        "trace_id": trace_id,
        "occurred_at": "2026-11-29T12:00:00Z",
        "model": {"id": "claude-haiku-4-5"},
        "request": {
            "model": "claude-haiku-4-5",
            "max_tokens": 10,
            "temperature": 0.5,
            "top_p": 0.9,
            "top_k": 5,
            "messages": [{"role": "user", "content": f"write to {SECRET}"}],
        },
        "response": {
            "id": f"msg_{trace_id}",
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
        "usage": {"input_tokens": 3, "output_tokens": 1, "cache_read_input_tokens": 0},
        "latency_ms": 120.0,
        "cost_usd": 0.0001,
    }
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = doc
        for p in parents:
            target = target[p]
        target[leaf] = value
    return doc


NUMERIC_FIELDS = [
    "request__max_tokens",
    "request__temperature",
    "request__top_p",
    "request__top_k",
    "response__usage__input_tokens",
    "response__usage__output_tokens",
    "usage__input_tokens",
    "usage__output_tokens",
    "usage__cache_read_input_tokens",
    "latency_ms",
    "cost_usd",
]
BAD_TIMES = ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00Z", "9999-12-31T00:00:00Z"]


def _jsonl_fixture() -> tuple[bytes, dict[int, str]]:
    """(object bytes, line -> the error class expected there); other lines are good."""
    lines: list[str] = []
    expected: dict[int, str] = {}

    def good():
        lines.append(json.dumps(_frozen(f"good-{len(lines) + 1}")))

    def bad(text: str, error_class: str):
        lines.append(text)
        expected[len(lines)] = error_class

    good()
    bad('{"trace_id": "' + SECRET + '", "x": ' + "[" * 10_000 + "]" * 10_000 + "}", "too_deep")
    good()
    for at in BAD_TIMES:
        bad(json.dumps(_frozen("t-time", occurred_at=at)), "invalid_record")
    for field in NUMERIC_FIELDS:
        # a string where a number belongs; the text is the PII itself
        doc = _frozen(f"t-{field}", **{field: SECRET})
        if field.startswith("response__usage"):
            del doc["usage"]  # else the document's own usage is the one stored, and the response's is unused
        bad(json.dumps(doc), None)
        good()
    bad(json.dumps(_frozen("t-nan")).replace('"cost_usd": 0.0001', '"cost_usd": NaN'), "invalid_json")
    bad(json.dumps(_frozen("t-inf")).replace('"latency_ms": 120.0', '"latency_ms": -Infinity'), "invalid_json")
    bad(json.dumps(_frozen("t-dup")).replace('"trace_id": "t-dup"', f'"trace_id": "t-dup", "trace_id": "{SECRET}"'),
        "ambiguous_record")  # fmt: skip
    # a dict key that is PII in a field whose values are typed (segment values must be text)
    bad(json.dumps(_frozen("t-key", segment={SECRET: {"zq_inner_key": 1}})), "invalid_record")
    good()
    return "\n".join(lines).encode(), expected


def _array_fixture() -> bytes:
    records = [_frozen("arr-1"), _frozen("arr-big", output_text="y" * (MAX_RECORD_BYTES + 10)), _frozen("arr-3")]
    return json.dumps(records).encode()


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad_records")
    settings = local_settings(tmp)
    folder = tmp / "source" / "2026" / "11" / "29"
    folder.mkdir(parents=True)
    data, expected = _jsonl_fixture()
    (folder / "bad.jsonl").write_bytes(data)
    (folder / "array.json").write_bytes(_array_fixture())
    result = run_stage(settings, "ingest", DAY)
    return settings.warehouse(), expected, result


def test_the_day_runs_and_every_good_record_is_ingested(ingested):
    warehouse, expected, result = ingested
    assert result.success
    traces = set(warehouse.read("calls")["trace_id"].to_list())
    good = {t for t in traces if t.startswith("good-")}
    assert len(good) == len(NUMERIC_FIELDS) + 3
    assert {"arr-1", "arr-3"} <= traces and "arr-big" not in traces
    assert not any(t.startswith("t-") for t in traces), "no bad record was ingested"


def test_each_bad_record_is_a_quarantine_row_with_object_line_and_problem(ingested):
    warehouse, expected, _ = ingested
    q = warehouse.read("quarantine")
    found = {(k.rsplit("/", 1)[1], line): cls for k, line, cls in q.select("source_key", "line", "error_class").rows()}
    for line, error_class in expected.items():
        assert ("bad.jsonl", line) in found, f"line {line} not quarantined"
        if error_class is not None:
            assert found[("bad.jsonl", line)] == error_class, line
    assert found[("array.json", 2)] == "oversized_record"
    assert len(found) == len(expected) + 1
    log = warehouse.read("ingest_log")
    for row in log.iter_rows(named=True):
        assert row["records_read"] == row["records_ingested"] + row["records_quarantined"]
        assert row["status"] == "partial"


def test_wrong_types_name_the_field_and_no_message_quotes_the_record(ingested):
    warehouse, _, result = ingested
    q = warehouse.read("quarantine")
    messages = q["message"].to_list()
    assert all(SECRET not in m for m in messages)
    assert all("zq_inner_key" not in m for m in messages)
    text = " ".join(messages)
    for field in ("max_tokens", "temperature", "top_p", "top_k", "latency_ms", "cost_usd", "input_tokens"):
        assert field in text, field
    assert "segment.<key>" in text  # the dict key is replaced, the structure kept
    assert "year" in text or "outside" in text
    # nor do the run's logs or the assets' metadata
    for event in result.all_events:
        assert SECRET not in str(event.event_specific_data or "") and SECRET not in (event.message or "")
    assert q.filter(pl.col("source_key").str.ends_with("bad.jsonl")).height == len(q) - 1
