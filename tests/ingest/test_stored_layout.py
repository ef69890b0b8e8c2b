"""What tables store (pipelines/record/stored.py) against what readers get back:
the Delta files leave out what another column already says, reads put it back."""

from __future__ import annotations

import hashlib
from datetime import UTC, date, datetime, timedelta

import polars as pl

from pipelines.demo import generate
from pipelines.record import canonical
from pipelines.record.rows import finalize_call, new_call, span_for_call
from pipelines.record.stored import (
    CALLS_RECORD_DIGEST_CHARS,
    CHANGE_DIGEST_CHARS,
    SAME_AS_SPAN_KEY,
    computed_request_sha256,
    request_sha256_of,
    spans_to_store,
    spans_with_calls,
)
from pipelines.resources.warehouse import Warehouse, to_arrow
from tests.environments import local_settings, run_stage

AT = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
DAY = date(2026, 11, 20)


def _call(span_id: str, recorded: str | None, body: dict | None) -> dict:
    call = new_call(
        source_format="frozen_call",
        trace_id="trace-1",
        span_id=span_id,
        occurred_at=AT,
        ended_at=AT + timedelta(milliseconds=850),
        request_model="claude-sonnet-4-6",
        status="ok",
        usage={"input_tokens": 12, "output_tokens": 3, "cost_usd": 0.0001},
        request_json=None if body is None else canonical.canonical_json(body),
        rendered_request_sha256=recorded,
    )
    return finalize_call(call)


def test_request_hash_is_stored_only_where_it_differs_and_always_read_back(tmp_path):
    body = {"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    same = _call("s1", canonical.request_sha256(body), body)
    other = _call("s2", canonical.request_sha256({**body, "max_tokens": 6}), body)
    no_body = _call("s3", canonical.request_sha256(body), None)
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", [same, other, no_body])

    raw = {r["span_id"]: r for r in pl.read_delta(warehouse.table_uri("calls")).to_dicts()}
    assert raw["s1"]["request_sha256"] is None and raw["s1"]["request_hash_matches"] is True
    assert raw["s2"]["request_sha256"] == other["request_sha256"] != other["rendered_request_sha256"]
    assert raw["s3"]["request_sha256"] is None and raw["s3"]["request_hash_matches"] is None
    # the core computes the record digest in full; `calls` stores its first 16 digits (its successor)
    assert len(same["record_sha256"]) == 64 and CALLS_RECORD_DIGEST_CHARS == 16
    assert raw["s1"]["record_sha256"] == same["record_sha256"][:CALLS_RECORD_DIGEST_CHARS]

    read = {r["span_id"]: r for r in warehouse.read("calls").to_dicts()}
    for built in (same, other, no_body):
        assert read[built["span_id"]]["request_sha256"] == built["request_sha256"]
        assert request_sha256_of(raw[built["span_id"]]) == built["request_sha256"]
    direct = pl.read_delta(warehouse.table_uri("calls")).sort("span_id").select(computed_request_sha256())
    assert direct["request_sha256"].to_list() == [same["request_sha256"], other["request_sha256"], None]
    # a re-run with the same rows changes nothing
    version = warehouse.version("calls")
    assert not warehouse.merge("calls", [same, other, no_body]).committed and warehouse.version("calls") == version


def test_llm_spans_come_from_calls_unless_they_say_more(tmp_path):
    body = {"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    plain, stepped = _call("s1", None, body), _call("s2", None, body)
    spans = [
        span_for_call(plain),
        span_for_call(stepped, step_index=4, attributes_json='{"agent":"orders"}'),
        # spans of no call: a tool, and an llm span whose call was not captured
        {**span_for_call(plain), "span_key": "tool-1", "span_id": "t1", "kind": "tool", "call_id": None},
        {**span_for_call(plain), "span_key": "llm-x", "span_id": "x1", "call_id": None},
    ]
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", [plain, stepped])
    warehouse.merge("spans", spans_to_store(to_arrow("spans", spans), [plain, stepped]))

    stored = pl.read_delta(warehouse.table_uri("spans")).sort("span_id")
    assert stored["span_id"].to_list() == ["s2", "t1", "x1"]  # the plain one is its call's row again
    assert all(len(d) == CHANGE_DIGEST_CHARS for d in stored["record_sha256"])
    # the stored llm span's call id is its span key: not stored twice; no call stays null
    assert stored["call_id"].to_list() == [SAME_AS_SPAN_KEY, None, None]
    read = {r["span_id"]: r for r in warehouse.read("spans").to_dicts()}
    assert set(read) == {"s1", "s2", "t1", "x1"}
    direct = spans_with_calls(pl.scan_delta(warehouse.table_uri("spans")), pl.scan_delta(warehouse.table_uri("calls")))
    assert direct.collect().sort("span_key").equals(warehouse.read("spans").sort("span_key"))
    for built in spans:
        got = read[built["span_id"]]
        assert {k: v for k, v in got.items() if k != "record_sha256"} == {
            k: v for k, v in built.items() if k != "record_sha256"
        }
    assert read["s2"]["step_index"] == 4 and read["s1"]["call_id"] == plain["call_id"]


def test_demo_day_spans_read_the_same_with_fewer_rows_stored(tmp_path, instance):
    settings = local_settings(tmp_path)
    generate(settings.source_uri, calls=120, days=1, seed=5, end=DAY)
    assert run_stage(settings, "ingest", DAY.isoformat(), instance).success
    warehouse = settings.warehouse()
    calls = warehouse.read("calls")
    spans = warehouse.read("spans")
    stored = pl.read_delta(warehouse.table_uri("spans"))
    llm = spans.filter(pl.col("kind") == "llm_call")
    # every call is also a span, read back; most of them are not stored twice
    assert set(calls["call_id"]) <= set(llm["call_id"]) and (llm["call_id"] == llm["span_key"]).all()
    assert stored.height < spans.height and spans["span_key"].is_unique().all()
    # the files hold no span key (each is derived from the span's source format, trace and span id)
    assert stored["span_key"].null_count() == stored.height
    keys = stored.select(pl.concat_str(["source_format", "trace_id", "span_id"], separator="|"))
    derived = {hashlib.sha256(k.encode()).hexdigest() for k in keys.to_series()}
    assert derived <= set(spans["span_key"])
    # the traces rollup counts the llm spans it reads back
    traces = warehouse.read("traces")
    assert traces["call_count"].sum() == calls.height


def test_a_calls_table_written_with_64_digit_record_digests_merges_without_rewrites_or_second_rows(
    tmp_path, monkeypatch
):
    from pipelines.record import stored

    body = {"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    calls = [_call(f"s{i}", canonical.request_sha256(body), body) for i in range(3)]
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    # the layout before: the record digest stored in full
    monkeypatch.setattr(stored, "CALLS_RECORD_DIGEST_CHARS", 64)
    warehouse.merge("calls", calls)
    monkeypatch.undo()
    raw = pl.read_delta(warehouse.table_uri("calls"))
    assert sorted(raw["record_sha256"]) == sorted(c["record_sha256"] for c in calls)

    # the same rows again: their 64 stored digits begin with the 16 a merge brings now
    version = warehouse.version("calls")
    assert not warehouse.merge("calls", calls).committed and warehouse.version("calls") == version
    # a rewrite of rows as read (16 digits) finds them unchanged since, and replaces them
    read = warehouse.read("calls")
    assert {len(d) for d in read["record_sha256"]} == {CALLS_RECORD_DIGEST_CHARS}
    assert warehouse.rewrite("calls", read.with_columns(pl.lit("swept").alias("status"))).updated == 3
    # a changed row is merged onto its stored row, not beside it
    changed = finalize_call({**calls[1], "status": "error", "record_sha256": None})
    assert changed["record_sha256"] != calls[1]["record_sha256"]
    result = warehouse.merge("calls", [changed])
    assert (result.updated, result.inserted) == (1, 0)
    after = warehouse.read("calls").sort("span_id")
    assert after["span_id"].to_list() == ["s0", "s1", "s2"]
    assert after["status"].to_list() == ["swept", "error", "swept"]
    assert after["record_sha256"][1] == changed["record_sha256"][:CALLS_RECORD_DIGEST_CHARS]
