"""`retention`, `rot_checks` and `redaction_audit` name their call by the first digits of its
id where that names it alone among the day's calls (record/stored.py ``short_call_ids``), and
every reader through the warehouse gets the full id back. The prefix is forced to one hex digit
here so that calls of one day collide: a colliding call keeps its id in full."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import polars as pl
import pytest

from pipelines.ingest_plan import TableWrite
from pipelines.record import canonical, stored
from pipelines.record.rows import span_for_call
from pipelines.record.stored import with_call_values
from pipelines.resources.warehouse import Warehouse, to_arrow
from pipelines.retention.erasure import forget_user
from pipelines.rot.table import rot_rows
from tests.ingest.test_stored_side_tables import AT, DAY, KEY, _audit, _call, _decision
from tests.rot.test_stored_checks import CHECKED, INGREDIENTS, _check

SIDE_TABLES = ("retention", "redaction_audit", "rot_checks")


@pytest.fixture
def one_digit(monkeypatch):
    monkeypatch.setattr(stored, "SHORT_CALL_ID_CHARS", 1)


def _rows(name: str, calls: list[dict]) -> list:
    if name == "retention":
        return [_decision(c["call_id"], c["trace_id"]) for c in calls]
    if name == "redaction_audit":
        return [_audit(c["call_id"], c["trace_id"]) for c in calls]
    return rot_rows([_check(c, "verified", c["rendered_request_sha256"]) for c in calls], INGREDIENTS, CHECKED, "r1")


def _partition(name: str):
    return CHECKED.date() if name == "rot_checks" else DAY


def _stored_ids(warehouse: Warehouse, name: str) -> list[str]:
    return pl.read_delta(warehouse.table_uri(name))["call_id"].to_list()


def _calls(n: int, user_id: str = "u-1") -> list[dict]:
    return [_call(f"s{i}", f"trace-{i}", user_id) for i in range(n)]


@pytest.mark.parametrize("name", SIDE_TABLES)
def test_a_prefix_only_where_it_names_one_call_of_the_day_and_every_reader_gets_the_full_id(tmp_path, one_digit, name):
    calls = _calls(24)  # 16 possible first digits: some calls share theirs
    first_digits = Counter(c["call_id"][0] for c in calls)
    assert any(n > 1 for n in first_digits.values()) and any(n == 1 for n in first_digits.values())
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", calls)
    rows = _rows(name, calls)
    warehouse.merge(name, rows, partitions=[_partition(name)])

    want = {c["call_id"][0] if first_digits[c["call_id"][0]] == 1 else c["call_id"] for c in calls}
    assert sorted(_stored_ids(warehouse, name)) == sorted(want)
    read = warehouse.read(name)
    assert sorted(read["call_id"].to_list()) == sorted(c["call_id"] for c in calls)
    assert dict(zip(read["call_id"], read["trace_id"], strict=True)) == {c["call_id"]: c["trace_id"] for c in calls}
    # a filter on a call id finds its row, whichever way it is stored
    for call in calls:
        assert warehouse.read(name, pl.col("call_id") == call["call_id"]).height == 1
    # a re-run finds every row by its stored key: no new version, no second row
    version = warehouse.version(name)
    assert not warehouse.merge(name, rows, partitions=[_partition(name)]).committed
    assert warehouse.version(name) == version


def test_a_row_keeps_the_form_it_was_stored_in(tmp_path, one_digit):
    # a decision written before its call was ingested keeps its full id once the call is there
    (call,) = _calls(1)
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", [_call("other", "trace-o")])  # the table exists, without the call
    warehouse.merge("retention", [_decision(call["call_id"], call["trace_id"])], partitions=[DAY])
    assert _stored_ids(warehouse, "retention") == [call["call_id"]]
    warehouse.merge("calls", [call])
    changed = _decision(call["call_id"], call["trace_id"], tier="ingredients")
    assert warehouse.merge("retention", [changed], partitions=[DAY]).updated == 1
    assert _stored_ids(warehouse, "retention") == [call["call_id"]]
    assert warehouse.read("retention")["tier"].to_list() == ["ingredients"]


def _by_first_digit(calls: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for call in calls:
        groups.setdefault(call["call_id"][0], []).append(call)
    return groups


def test_a_call_arriving_later_with_the_same_prefix_never_lends_its_id(tmp_path, one_digit):
    by_digit = _by_first_digit(_calls(40))
    first, late = next(group for group in by_digit.values() if len(group) >= 2)[:2]
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", [first])
    warehouse.merge("redaction_audit", [_audit(first["call_id"], first["trace_id"])], partitions=[DAY])
    assert _stored_ids(warehouse, "redaction_audit") == [first["call_id"][0]]
    warehouse.merge("calls", [late])
    # the prefix now begins two calls' ids: the row reads it as stored, not as `late`'s id
    assert warehouse.read("redaction_audit")["call_id"].to_list() == [first["call_id"][0]]
    # the later call's row is written in full and reads back whole
    warehouse.merge("redaction_audit", [_audit(late["call_id"], late["trace_id"])], partitions=[DAY])
    assert sorted(_stored_ids(warehouse, "redaction_audit")) == sorted([first["call_id"][0], late["call_id"]])
    read = warehouse.read("redaction_audit", pl.col("call_id") == late["call_id"])
    assert read["trace_id"].to_list() == [late["trace_id"]]


def test_ingest_checks_the_prefix_against_its_hours_stored_calls_and_its_own(tmp_path, one_digit):
    # a shard's audit rows: the calls it wrote (call_rows) and another shard's stored calls
    by_digit = _by_first_digit(_calls(40))
    theirs, ours = next(group for group in by_digit.values() if len(group) >= 2)[:2]
    alone = next(group[0] for group in by_digit.values() if len(group) == 1)
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", [theirs, ours, alone])
    audit = [_audit(c["call_id"], c["trace_id"]) for c in (ours, alone)]
    write = TableWrite("redaction_audit", audit, {DAY}, None, False, to_arrow("calls", [ours, alone]))
    assert write.merge_into(warehouse).inserted == 2
    assert sorted(_stored_ids(warehouse, "redaction_audit")) == sorted([ours["call_id"], alone["call_id"][0]])
    assert sorted(warehouse.read("redaction_audit")["call_id"]) == sorted([ours["call_id"], alone["call_id"]])
    assert not write.merge_into(warehouse).committed


def test_erasure_deletes_by_the_stored_key_and_spares_calls_sharing_a_prefix(tmp_path, one_digit):
    mine = [_call(f"m{i}", f"trace-m{i}", "u-erased") for i in range(12)]
    others = [_call(f"o{i}", f"trace-o{i}", "u-other") for i in range(12)]
    digits = Counter(c["call_id"][0] for c in mine + others)
    # some of the user's calls are stored by a prefix, some in full beside another user's call
    assert {digits[c["call_id"][0]] == 1 for c in mine} == {True, False}
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", mine + others)
    for name in SIDE_TABLES:
        warehouse.merge(name, _rows(name, mine + others), partitions=[_partition(name)])
        assert any(len(i) == 1 for i in _stored_ids(warehouse, name))

    report = forget_user(warehouse, "u-erased", key=KEY, requested_by="DSR-2", now=AT + timedelta(days=1))

    assert report.rows_remaining == 0
    for name in SIDE_TABLES:
        assert report.rows_deleted[name] == len(mine), name
        assert sorted(warehouse.read(name)["call_id"]) == sorted(c["call_id"] for c in others), name


def _tool_spans(calls: list[dict]) -> list[dict]:
    spans = []
    for i, call in enumerate(calls):
        span = {**span_for_call(call), "span_id": f"tool-{i}", "kind": "tool", "call_id": None, "tool_name": "lookup"}
        spans.append({**span, "span_key": canonical.call_id(span["source_format"], span["trace_id"], span["span_id"])})
    return spans


@pytest.mark.parametrize("digits", [None, 1])
def test_audit_rows_of_spans_name_their_span_by_a_prefix_too(tmp_path, monkeypatch, digits):
    if digits is not None:
        monkeypatch.setattr(stored, "SHORT_CALL_ID_CHARS", digits)
    chars = stored.SHORT_CALL_ID_CHARS
    calls = _calls(10)
    spans = _tool_spans(calls)
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", calls)
    warehouse.merge("spans", spans)
    audit = [_audit(c["call_id"], c["trace_id"]) for c in calls]
    audit += [_audit(s["span_key"], s["trace_id"], "spans", 0) for s in spans]
    warehouse.merge("redaction_audit", audit, partitions=[DAY])

    # a prefix where no other call or span of the day begins with it (calls and spans together)
    firsts = Counter(k[:chars] for k in [*(c["call_id"] for c in calls), *(s["span_key"] for s in spans)])
    want = [r["call_id"][:chars] if firsts[r["call_id"][:chars]] == 1 else r["call_id"] for r in audit]
    assert sorted(_stored_ids(warehouse, "redaction_audit")) == sorted(want)
    assert any(len(k) == chars for k in want)
    read = warehouse.read("redaction_audit")
    assert sorted(zip(read["call_id"], read["source_table"], read["trace_id"], strict=True)) == sorted(
        (r["call_id"], r["source_table"], r["trace_id"]) for r in audit
    )
    direct = with_call_values(
        "redaction_audit",
        pl.scan_delta(warehouse.table_uri("redaction_audit")),
        pl.scan_delta(warehouse.table_uri("calls")),
        spans=pl.scan_delta(warehouse.table_uri("spans")),
    ).collect()
    assert direct.sort("call_id").equals(read.sort("call_id"))
    assert not warehouse.merge("redaction_audit", audit, partitions=[DAY]).committed


def test_a_shard_checks_its_own_hours_and_a_collision_across_hours_names_no_call(tmp_path, one_digit):
    # ingest's audit write checks the calls of its hours; a call of another hour of the day
    # with the same prefix is left to reading, which then names neither call
    by_digit = _by_first_digit(_calls(40))
    ours, theirs = next(group for group in by_digit.values() if len(group) >= 2)[:2]
    theirs = {**theirs, "occurred_at": AT + timedelta(hours=3), "ended_at": AT + timedelta(hours=3, seconds=1)}
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", [ours, theirs])
    write = TableWrite(
        "redaction_audit", [_audit(ours["call_id"], ours["trace_id"])], {DAY}, None, False, to_arrow("calls", [ours])
    )
    write.merge_into(warehouse)
    assert _stored_ids(warehouse, "redaction_audit") == [ours["call_id"][0]]
    assert warehouse.read("redaction_audit")["call_id"].to_list() == [ours["call_id"][0]]
    # a stage's write checks the whole day: the same row from it keeps its full id
    warehouse.merge("retention", [_decision(ours["call_id"], ours["trace_id"])], partitions=[DAY])
    assert _stored_ids(warehouse, "retention") == [ours["call_id"]]
