"""`calls.call_id` and `spans.span_key` are sha256 of "source_format|trace_id|span_id": the
files hold them as null where they are that, every reader gets them back, and a merge finds a
stored row by the columns they are derived from (record/stored.py ``key_predicate``), also in a
table written with full keys."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import polars as pl
from deltalake import write_deltalake

from pipelines.record.rows import span_for_call
from pipelines.record.schema import CALLS
from pipelines.record.stored import CALLS_RECORD_DIGEST_CHARS, spans_with_calls
from pipelines.resources.warehouse import WRITER_PROPERTIES, Warehouse, to_arrow
from pipelines.retention.erasure import forget_user
from tests.ingest.test_stored_side_tables import AT, DAY, KEY, _call, _decision


def _spans(n: int, user_id: str = "u-1") -> list[dict]:
    calls = [_call(f"s{i}", f"trace-{i}", user_id) for i in range(n)]
    # tool spans: no call, a key derived like every span's
    tools = [
        {**span_for_call(c), "span_id": f"tool-{i}", "kind": "tool", "call_id": None, "tool_name": "lookup"}
        for i, c in enumerate(calls)
    ]
    for span in tools:
        span["span_key"] = hashlib.sha256(
            f"{span['source_format']}|{span['trace_id']}|{span['span_id']}".encode()
        ).hexdigest()
    return tools


def test_span_keys_are_derived_on_reading_and_merges_find_the_stored_rows(tmp_path):
    spans = _spans(6)
    # a span whose key is not the derived one (a hand-made key) keeps it
    spans.append({**spans[0], "span_id": "odd", "span_key": "kept-key"})
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("spans", spans)

    files = pl.read_delta(warehouse.table_uri("spans")).sort("span_id")
    assert files.filter(pl.col("span_id") != "odd")["span_key"].null_count() == len(spans) - 1
    assert files.filter(pl.col("span_id") == "odd")["span_key"].to_list() == ["kept-key"]
    read = warehouse.read("spans")
    assert sorted(read["span_key"]) == sorted(s["span_key"] for s in spans)
    for span in spans:
        (got,) = warehouse.read("spans", pl.col("span_key") == span["span_key"]).to_dicts()
        assert {k: v for k, v in got.items() if k != "record_sha256"} == {
            k: v for k, v in span.items() if k not in ("record_sha256",)
        }
    no_calls = pl.from_arrow(CALLS.empty_table()).lazy()
    direct = spans_with_calls(pl.scan_delta(warehouse.table_uri("spans")), no_calls)
    assert direct.collect().sort("span_key").equals(read.sort("span_key"))

    # a re-run matches every stored row: nothing new
    version = warehouse.version("spans")
    assert not warehouse.merge("spans", spans).committed and warehouse.version("spans") == version
    # a changed span updates its stored row, no second row
    changed = {**spans[1], "tool_name": "search", "record_sha256": "f" * 64}
    result = warehouse.merge("spans", [changed])
    assert (result.updated, result.inserted) == (1, 0)
    assert warehouse.read("spans", pl.col("span_key") == spans[1]["span_key"])["tool_name"].to_list() == ["search"]


def _written_before(warehouse: Warehouse, name: str, rows: list[dict]) -> None:
    """``rows`` written in the layout before keys were derived: every key in the file."""
    data = to_arrow(name, rows)
    data = data.append_column("occurred_hour", pl.Series([AT.hour] * len(rows), dtype=pl.Int32).to_arrow())
    partitions = ["occurred_date", "occurred_hour"]
    write_deltalake(warehouse.table_uri(name), data, partition_by=partitions, writer_properties=WRITER_PROPERTIES)


def test_a_table_written_with_full_span_keys_is_merged_into_without_a_second_row(tmp_path):
    spans = _spans(4)
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    _written_before(warehouse, "spans", spans)
    assert pl.read_delta(warehouse.table_uri("spans"))["span_key"].null_count() == 0
    assert not warehouse.merge("spans", spans).committed
    later = {**spans[0], "ended_at": AT + timedelta(seconds=9), "record_sha256": "e" * 64}
    assert warehouse.merge("spans", [later]).updated == 1
    assert warehouse.read("spans").height == len(spans)


def test_erasure_finds_spans_without_stored_keys(tmp_path):
    mine, theirs = _spans(3, "u-erased"), [{**s, "trace_id": s["trace_id"] + "-o"} for s in _spans(2, "u-other")]
    for span in theirs:
        span["span_key"] = hashlib.sha256(
            f"{span['source_format']}|{span['trace_id']}|{span['span_id']}".encode()
        ).hexdigest()
    calls = [_call("s0", "trace-0", "u-erased")]
    # the user's call's own span, stored because it says more: call id "=", key derived, no user id
    own = {**span_for_call(calls[0], step_index=2), "user_id": None, "session_id": None}
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", calls)
    warehouse.merge("spans", [*mine, *theirs, own])
    files = pl.read_delta(warehouse.table_uri("spans"))
    assert files["span_key"].null_count() == files.height == len(mine) + len(theirs) + 1

    report = forget_user(warehouse, "u-erased", key=KEY, requested_by="DSR-3", now=AT + timedelta(days=1))

    assert report.rows_deleted["spans"] == len(mine) + 1 and report.rows_remaining == 0
    assert sorted(warehouse.read("spans")["span_key"]) == sorted(s["span_key"] for s in theirs)


def test_call_ids_are_derived_on_reading_and_merges_find_the_stored_calls(tmp_path):
    calls = [_call(f"s{i}", f"trace-{i % 2}") for i in range(4)]
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", calls)
    assert pl.read_delta(warehouse.table_uri("calls"))["call_id"].null_count() == len(calls)
    assert sorted(warehouse.read("calls")["call_id"]) == sorted(c["call_id"] for c in calls)
    for call in calls:
        (got,) = warehouse.read("calls", pl.col("call_id") == call["call_id"]).to_dicts()
        assert (got["span_id"], got["trace_id"], got["record_sha256"]) == (
            call["span_id"],
            call["trace_id"],
            call["record_sha256"][:CALLS_RECORD_DIGEST_CHARS],
        )
    version = warehouse.version("calls")
    assert not warehouse.merge("calls", calls).committed and warehouse.version("calls") == version
    changed = {**calls[2], "status": "error", "record_sha256": "d" * 64}
    result = warehouse.merge("calls", [changed])
    assert (result.updated, result.inserted) == (1, 0)
    assert warehouse.read("calls", pl.col("call_id") == calls[2]["call_id"])["status"].to_list() == ["error"]
    # the tables that name a call find it by the derived id: its spans and side rows read whole
    warehouse.merge("retention", [_decision(c["call_id"], c["trace_id"]) for c in calls], partitions=[DAY])
    read = warehouse.read("retention")
    assert dict(zip(read["call_id"], read["trace_id"], strict=True)) == {c["call_id"]: c["trace_id"] for c in calls}


def test_a_calls_table_written_with_full_ids_is_merged_into_without_a_second_row(tmp_path):
    calls = [_call(f"s{i}", "trace-a") for i in range(3)]
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    _written_before(warehouse, "calls", calls)
    assert not warehouse.merge("calls", calls).committed
    assert warehouse.merge("calls", [{**calls[0], "status": "error", "record_sha256": "c" * 64}]).updated == 1
    assert sorted(warehouse.read("calls")["call_id"]) == sorted(c["call_id"] for c in calls)
