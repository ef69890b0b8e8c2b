"""The fast paths of the ingest core give exactly what the slow, reference paths give.

- canonical JSON: orjson writes it unless its bytes could differ from the
  spec's serializer (``json.dumps`` with sorted keys, compact separators,
  ``ensure_ascii=False``); for each value where they do differ the guard must
  pick the spec's bytes;
- strict parsing: orjson parses a record unless it would read it differently
  from the strict stdlib decoder (duplicate keys, ints past 64 bits, NaN);
- the Arrow the schema check builds per object is what the write converts,
  also for rows assembly changed afterwards.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipelines.demo import generate
from pipelines.formats import _first_record
from pipelines.formats.base import AmbiguousRecord, NonFiniteNumber, strict_loads
from pipelines.ingest.objects import SourceObject, ingest_objects
from pipelines.record import canonical
from pipelines.record.schema import TABLES
from pipelines.resources.object_store import ObjectStore


def spec(value):
    """The hashing spec written out with the stdlib, the reference."""
    return json.dumps(canonical.drop_none(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


DIFFERING = {
    "a float below 1e-4": {"temperature": 0.00001234, "top_p": -9.5e-05},
    "an int over 64 bits": {"seed": 2**64, "offset": -(2**63) - 1},
    "a non-string key": {"segment": {1: "a", 2: "b"}},
    "NaN and Infinity": {"score": float("nan"), "limit": float("inf")},
}


@pytest.mark.parametrize("case", sorted(DIFFERING))
def test_guard_picks_the_spec_bytes_where_orjson_differs(case):
    value = {"model": "claude-sonnet-4-5", **DIFFERING[case]}
    try:
        fast = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        fast = None  # orjson refuses it outright
    assert fast != spec(value)  # the case is real: orjson alone would be wrong here
    assert canonical.canonical_bytes(value) == spec(value)
    assert canonical.request_sha256(value) == canonical.sha256_hex(spec(value))


def test_orjson_bytes_are_kept_where_they_are_the_spec():
    value = {
        "model": "claude",
        "system": "Você é o assistente — sem \\u escapes, \u2028 e controles \x01\n\t",
        "messages": [{"role": "user", "content": "id 3e-4a1b, nota 0.0001"}],
        "temperature": 0.7,
        "budget": 1.5e16,  # exponent forms go the spec's way too (orjson agrees on these)
        "tiny": 5e-324,
        "max_tokens": 2**63,
        "stop_sequences": ["\U0001f600", "\uffff"],
        "metadata": None,
    }
    assert canonical.canonical_bytes(value) == spec(value)
    # None dropped from objects at every depth, kept in lists
    assert canonical.canonical_json({"a": [None, {"b": None}], "c": None}) == '{"a":[null,{}]}'


def test_block_hashes_follow_the_spec_for_guarded_values():
    request = {
        "model": "m",
        "system": "s",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "x", "weight": 1e-05}]}],
        "seed": 2**70,
    }
    rows = canonical.block_hashes_from_json(canonical.canonical_json(request))
    hashes = {r["block"]: r["sha256"] for r in rows}
    assert hashes["messages[0]"] == canonical.sha256_hex(spec(request["messages"][0]))
    assert hashes["params"] == canonical.sha256_hex(spec({"seed": 2**70}))
    assert canonical.parse_canonical(canonical.canonical_json(request))["seed"] == 2**70


@pytest.mark.parametrize(
    "request_body, kept",
    [
        ({"model": "m", "system": "s", "messages": [{"role": "user", "content": "oi"}], "max_tokens": 5}, True),
        ({"model": "m", "messages": [{"role": "user", "content": "x", "name": None}]}, None),  # a None: cleaned
        ({"model": "m", "messages": [], "temperature": 1e-05}, False),  # a float the spec writes otherwise
        ({"model": "m", "messages": [], "metadata": {"user_id": "u"}, "seed": 2**70}, False),  # orjson refuses it
    ],
)
def test_block_hashes_from_the_kept_request_are_those_of_the_text(request_body, kept):
    """``canonical_request`` hands the request back only when its blocks can be
    hashed from it as they are; the hashes must be those parsed from the text,
    and the documents' fast bytes those of the spec."""
    text, plain = canonical.canonical_request(request_body)
    assert text == canonical.canonical_json(request_body)
    if kept is None:  # the None-free copy, which orjson writes as the spec does
        assert plain == canonical.drop_none(request_body) and plain is not request_body
    else:
        assert (plain is request_body) is kept and (plain is None) is not kept
    docs = [("d1", "Você \\u \u2028 null 1e-05"), ("d2", None), (7, "a number for an id")]
    parsed = canonical.block_hashes_from_json(text, docs, {"system": 3})
    if plain is not None:
        assert parsed == canonical.block_hashes_from_json(text, docs, {"system": 3}, plain_request=plain)
    hashes = {r["block"]: r["sha256"] for r in parsed}
    assert hashes["document:d1"] == canonical.sha256_hex(spec({"doc_id": "d1", "text": docs[0][1]}))
    assert hashes["document:7"] == canonical.sha256_hex(spec({"doc_id": 7, "text": docs[2][1]}))
    assert "document:d2" not in hashes


def test_record_sha256_is_the_same_with_and_without_string_keys_only():
    row = {"a": 1, "when": datetime(2026, 11, 20, tzinfo=UTC), "day": date(2026, 11, 20), "m": {"z": 1, "b": [2]}}
    with_option = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    assert canonical.record_sha256(row, ()) == canonical.sha256_hex(orjson.dumps(row, option=with_option, default=str))
    odd = {**row, "segment": {1: "a"}}  # a non-string key takes the other path, same digest rule
    assert canonical.record_sha256(odd, ()) == canonical.sha256_hex(orjson.dumps(odd, option=with_option, default=str))


@pytest.mark.parametrize(
    "text",
    [
        b'{"a": 1, "b": {"c": [1, 2.5, "x:y"]}}',
        b'{"n": 18446744073709551616, "m": -9223372036854775809}',
        b'{"big": 12345678901234567890123}',
        b'{"s": "\\u00e9\\u003a", "t": "\\ud83d\\ude00"}',
        b'{"x": 1e400}',
        b'{"x": 1e-400, "y": -0.0}',
    ],
)
def test_strict_loads_reads_what_json_reads(text):
    assert strict_loads(text) == json.loads(text)
    assert type(strict_loads(text)) is type(json.loads(text))
    if b"1844" in text:
        assert isinstance(strict_loads(text)["n"], int)


@pytest.mark.parametrize(
    "text, error",
    [
        (b'{"a": 1, "a": 2}', AmbiguousRecord),
        (b'{"a":1,"a":1}', AmbiguousRecord),
        (b'{"a": {"k": "x:y", "k": "z"}}', AmbiguousRecord),
        (b'{"a": "\\u003a", "b": 1, "b": 2}', AmbiguousRecord),
        (b'{"a": NaN}', NonFiniteNumber),
        (b'{"a": -Infinity}', NonFiniteNumber),
        (b'{"a": 1,}', json.JSONDecodeError),
    ],
)
def test_strict_loads_refuses_what_the_strict_decoder_refuses(text, error):
    with pytest.raises(error):
        strict_loads(text)


def test_batch_arrow_is_the_rows_converted(tmp_path):
    """The write's Arrow reuses each object's schema-check conversion: it must
    hold exactly the batch's rows, with the rows assembly changed after their
    check (a call seen twice keeps the feedback only its first record had)
    converted again."""
    day = date(2026, 11, 20)
    generate(str(tmp_path / "source"), calls=200, days=1, seed=5, end=day)
    store = ObjectStore(uri=str(tmp_path / "source"))
    objects = [
        SourceObject(i.key, store.uri_for(i.key), i.etag, i.size, i.last_modified, store.read(i.key))
        for i in store.list_day(day)
    ]
    frozen = next(o for o in objects if o.key.endswith(".jsonl.gz") and b"tracelake.frozen_call" in o.data)
    record = json.loads(frozen.data.splitlines()[0])
    with_feedback = json.dumps({**record, "feedback": {"name": "fast-path-test", "value": "up"}}).encode()
    earlier = SourceObject("a/first.jsonl", "file:///a/first.jsonl", "e1", len(with_feedback), frozen.last_modified)
    objects = [
        SourceObject(**{**earlier.__dict__, "data": with_feedback}),
        *objects,
    ]
    batch = ingest_objects(objects, day, "run", datetime(2026, 11, 21, tzinfo=UTC))
    assert len(batch.touched) == 1
    for table, key in (("calls", "call_id"), ("spans", "span_key")):
        expected = pa.Table.from_pylist(getattr(batch, table), schema=TABLES[table]).sort_by(key)
        got = batch.arrow(table)
        assert got.schema == TABLES[table]
        assert got.num_rows == len(getattr(batch, table))
        assert got.sort_by(key).equals(expected)
    carried = next(c for c in batch.calls if id(c) in batch.touched)
    assert "fast-path-test" in [f["name"] for f in carried["feedback"]]


FIRST_RECORDS = {
    "JSON Lines": b'{"a": 1}\n{"b": 2}\n',
    "one document on one line": b'{"a": 1}',
    "blank lines first": b'\n\n  {"a": 1}\n{"b": 2}',
    "CRLF": b'{"a": 1}\r\n{"b": 2}\r\n',
    "a bad first line": b'{"a": \n{"b": 2}\n',
    "a duplicate key first": b'{"a": 1, "a": 2}\n{"b": 2}\n',
    "an array on the first line": b'[{"a": 1}, {"b": 2}]\n{"c": 3}\n',
    "a pretty-printed document": b'{\n  "a": 1\n}\n',
    "a pretty-printed array": b'[\n  {"a": 1},\n  {"b": 2}\n]\n',
    "a UTF-8 BOM": b'\xef\xbb\xbf{"a": 1}\n{"b": 2}\n',
    "null first": b'null\n{"b": 2}\n',
}


@pytest.mark.parametrize("case", sorted(FIRST_RECORDS))
def test_detection_from_the_first_line_reads_what_the_whole_object_gives(case):
    """A line-delimited key lets detection parse the first line alone; it must
    find the record reading the object as a document would."""
    data = FIRST_RECORDS[case]
    assert _first_record(data, lines=True) == _first_record(data, lines=False)


def _day_objects(tmp_path, calls, seed):
    day = date(2026, 11, 20)
    generate(str(tmp_path / "source"), calls=calls, days=1, seed=seed, end=day)
    store = ObjectStore(uri=str(tmp_path / "source"))
    objects = [
        SourceObject(i.key, store.uri_for(i.key), i.etag, i.size, i.last_modified, store.read(i.key))
        for i in store.list_day(day)
    ]
    return day, objects


def _reference_span_for_call(call, **fields):
    """span_for_call as it was written before issue 13's fourth round: new_span, then finalize_span."""
    from pipelines.record.rows import finalize_span, new_span

    usage = call.get("usage") or {}
    return finalize_span(
        new_span(
            trace_id=call["trace_id"],
            span_id=call["span_id"],
            parent_span_id=call.get("parent_span_id"),
            session_id=call.get("session_id"),
            user_id=call.get("user_id"),
            call_id=call["call_id"],
            source_format=call["source_format"],
            source_uri=call.get("source_uri"),
            source_etag=call.get("source_etag"),
            source_line=call.get("source_line"),
            kind="llm_call",
            name=f"chat {call.get('request_model') or ''}".strip(),
            occurred_at=call.get("occurred_at"),
            ended_at=call.get("ended_at"),
            duration_ms=call.get("latency_ms"),
            status=call.get("status"),
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
            cost_usd=usage.get("cost_usd"),
            **fields,
        )
    )


def test_llm_spans_are_the_reference_rows(tmp_path):
    """span_for_call builds onto the all-None row and takes the call's call_id as the
    span key: every llm span of a demo day (both formats that build them, with and without
    extra columns) is, key for key and value for value, what new_span + finalize_span give."""
    from pipelines.record.rows import span_for_call

    day, objects = _day_objects(tmp_path, 300, 11)
    batch = ingest_objects(objects, day, "run", datetime(2026, 11, 21, tzinfo=UTC))
    llm_spans = {s["span_key"]: s for s in batch.spans if s["kind"] == "llm_call"}
    assert {c["source_format"] for c in batch.calls} == {"frozen_call", "agent_events"}
    assert len(llm_spans) == len(batch.calls)
    for call in batch.calls:
        extra = {k: llm_spans[call["call_id"]][k] for k in ("step_index", "attributes_json")}
        extra = {k: v for k, v in extra.items() if v is not None}
        for fields in ({}, extra, {"attributes_json": '{"name":"x"}'}):
            got, expected = span_for_call(call, **fields), _reference_span_for_call(call, **fields)
            assert list(got) == list(expected)
            assert got == expected
        # ingest_object stamps ingested_at on every row afterwards
        assert span_for_call(call, **extra) == {**llm_spans[call["call_id"]], "ingested_at": None}
    with pytest.raises(TypeError):
        span_for_call(batch.calls[0], status="ok")
    with pytest.raises(KeyError):
        span_for_call(batch.calls[0], not_a_column=1)


def test_a_write_in_one_chunk_stores_the_rows_of_many(tmp_path):
    """Rows arriving as many record batches (one per source object) are written in one
    chunk per column: the table read back holds exactly them."""
    from pipelines.delta import one_chunk
    from pipelines.resources.warehouse import Warehouse

    day, objects = _day_objects(tmp_path, 120, 3)
    batch = ingest_objects(objects, day, "run", datetime(2026, 11, 21, tzinfo=UTC))
    # as the rows of many objects come: many small record batches
    calls = pa.Table.from_batches(batch.arrow("calls").to_batches(max_chunksize=7))
    assert calls.column(0).num_chunks > 1
    single = one_chunk(calls)
    assert single.column(0).num_chunks == 1 and single.equals(calls)
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    morning = pc.less(pc.hour(calls["occurred_at"]), 12)
    first, second = calls.filter(morning), calls.filter(pc.invert(morning))
    assert first.column(0).num_chunks > 1 and second.num_rows
    assert warehouse.merge("calls", first, partitions={day}).inserted == first.num_rows
    version = warehouse.table("calls").version()
    assert warehouse.merge("calls", second, partitions={day}).inserted == second.num_rows
    assert warehouse.table("calls").version() == version + 1
    stored = warehouse.read("calls").sort("call_id")
    assert stored.height == calls.num_rows
    assert stored["call_id"].to_list() == sorted(calls["call_id"].to_pylist())
    assert stored["record_sha256"].to_list() == [
        r for _, r in sorted(zip(calls["call_id"].to_pylist(), calls["record_sha256"].to_pylist(), strict=True))
    ]


def _by_object(objects, day, now):
    """The reference: every object checked against the schema on its own (ingest_object), then assembled."""
    from pipelines.ingest.objects import IngestBatch, assemble_batch, ingest_object

    batch = IngestBatch()
    for obj in objects:
        batch.add(ingest_object(obj, day, "run", now))
    assemble_batch(batch)
    return batch


def _same_batches(got, expected):
    for table in ("calls", "spans", "ingest_log", "quarantine"):
        assert getattr(got, table) == getattr(expected, table), table
    for table in ("calls", "spans"):
        assert got.arrow(table).equals(expected.arrow(table)), table


def test_the_day_schema_check_is_the_check_of_each_object(tmp_path):
    """ingest_objects converts a clean day's rows at once (one record batch per table) and
    gives what checking object by object gives; with a value that does not fit in one
    object it falls back to the check per object, which quarantines that record alone."""
    now = datetime(2026, 11, 21, tzinfo=UTC)
    day, objects = _day_objects(tmp_path, 150, 9)
    clean = ingest_objects(objects, day, "run", now)
    assert [len(pieces) for pieces in clean.converted.values()] == [1, 1]
    _same_batches(clean, _by_object(objects, day, now))

    frozen = next(o for o in objects if o.key.endswith(".jsonl.gz") and b"tracelake.frozen_call" in o.data)
    lines = frozen.data.splitlines()
    bad = json.loads(lines[1])
    bad["request"]["max_tokens"] = "not a number"  # the request body is stored as sent: the schema check finds it
    data = b"\n".join([lines[0], json.dumps(bad).encode(), *lines[2:]]) + b"\n"
    broken = SourceObject(frozen.key, frozen.uri, "e2", len(data), frozen.last_modified, data)
    objects = [broken if o is frozen else o for o in objects]
    got = ingest_objects(objects, day, "run", now)
    _same_batches(got, _by_object(objects, day, now))
    assert [(q["source_key"], q["line"], q["error_class"]) for q in got.quarantine] == [(frozen.key, 2, "wrong_type")]
    assert len(got.calls) == len(clean.calls) - 1
