"""A record nested deeper than the pipeline can serialize is one quarantined
record, not a lost object: 500 good records beside records nested 256 to 900
levels deep (in JSON Lines, in a JSON array, alone in a document) all land,
and each deep record is a `too_deep` quarantine row naming its object, its
line and the depth allowed. orjson, which every later stage writes JSON with,
refuses values nested past 255 levels; json parses them up to ~1000."""

import json

import orjson
import polars as pl
import pytest

from pipelines.formats.base import MAX_DEPTH, json_records
from tests.environments import local_settings, run_stage

DAY = "2026-11-29"
GOOD = 500
DEPTHS = (256, 300, 600, 899)


def _frozen(trace_id: str, **extra) -> dict:
    return {
        "format": "tracelake.frozen_call",
        "trace_id": trace_id,
        "occurred_at": "2026-11-29T12:00:00Z",
        "model": {"id": "claude-haiku-4-5"},
        "request": {
            "model": "claude-haiku-4-5",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "where is my parcel?"}],
        },
        "output_text": "on its way",
        **extra,
    }


def _nested(depth: int) -> str:
    """A frozen call whose extra field makes the record ``depth`` levels deep (the record itself is one)."""
    inner = depth - 1
    doc = json.dumps(_frozen(f"deep-{depth}"))
    return doc[:-1] + ', "x": ' + "[" * inner + "]" * inner + "}"


def test_orjson_refuses_what_json_reads_past_the_depth_allowed():
    deep = json.loads(_nested(MAX_DEPTH + 1))
    with pytest.raises(TypeError):
        orjson.dumps(deep)
    orjson.dumps(json.loads(_nested(MAX_DEPTH)))  # the deepest record allowed is written


@pytest.mark.parametrize("depth", DEPTHS)
def test_a_deep_line_is_one_problem_and_the_lines_around_it_parse(depth):
    data = "\n".join([json.dumps(_frozen("a")), _nested(depth), json.dumps(_frozen("b"))]).encode()
    records = list(json_records(data, lines=True))
    assert [getattr(r, "line", None) for r in records] == [1, 2, 3]
    problem = records[1]
    assert problem.error_class == "too_deep" and str(MAX_DEPTH) in problem.message, problem
    assert [r.value["trace_id"] for r in (records[0], records[2])] == ["a", "b"]


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("deep_records")
    settings = local_settings(tmp)
    folder = tmp / "source" / "2026" / "11" / "29"
    folder.mkdir(parents=True)
    lines = [json.dumps(_frozen(f"good-{i}")) for i in range(GOOD)]
    deep_lines = {}
    for depth in DEPTHS:  # spread through the object: good records before and after each
        at = len(lines) * DEPTHS.index(depth) // len(DEPTHS) + 1
        lines.insert(at, _nested(depth))
    for number, line in enumerate(lines, start=1):
        if line.startswith('{"format": "tracelake.frozen_call", "trace_id": "deep-'):
            deep_lines[number] = line
    (folder / "calls.jsonl").write_text("\n".join(lines))
    array = [_frozen("arr-1"), json.loads(_nested(300)), _frozen("arr-3")]
    (folder / "array.json").write_text(json.dumps(array))
    (folder / "alone.json").write_text(_nested(256))
    result = run_stage(settings, "ingest", DAY)
    return settings.warehouse(), deep_lines, result


def test_every_good_record_of_the_objects_lands(ingested):
    warehouse, _, result = ingested
    assert result.success
    traces = set(warehouse.read("calls")["trace_id"].to_list())
    assert {t for t in traces if t.startswith("good-")} == {f"good-{i}" for i in range(GOOD)}
    assert {"arr-1", "arr-3"} <= traces
    assert not any(t.startswith("deep-") for t in traces), "no deep record is ingested"


def test_each_deep_record_is_a_quarantine_row_naming_object_and_line(ingested):
    warehouse, deep_lines, _ = ingested
    q = warehouse.read("quarantine").with_columns(pl.col("source_key").str.split("/").list.last().alias("name"))
    rows = q.select("name", "line", "error_class", "message").rows()
    found = {(name, line): (error_class, message) for name, line, error_class, message in rows}
    expected = {("calls.jsonl", line) for line in deep_lines} | {("array.json", 2), ("alone.json", 1)}
    assert set(found) == expected, "one row per deep record, nothing for the object"
    for error_class, message in found.values():
        assert error_class == "too_deep"
        assert f"at most {MAX_DEPTH} levels" in message, message
    log = {r["source_key"].rsplit("/", 1)[1]: r for r in warehouse.read("ingest_log").iter_rows(named=True)}
    assert log["calls.jsonl"]["records_ingested"] == GOOD
    assert log["calls.jsonl"]["records_quarantined"] == len(DEPTHS)
    assert log["array.json"]["records_ingested"] == 2
    assert (log["alone.json"]["records_ingested"], log["alone.json"]["records_quarantined"]) == (0, 1)
    for row in log.values():
        assert row["records_read"] == row["records_ingested"] + row["records_quarantined"]
