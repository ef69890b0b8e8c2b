"""What `retention` and `redaction_audit` store against what their readers get back: the
Delta files leave out the trace id their call says and keep 8 hex digits of the change
digest; reading through the warehouse (or with ``with_call_values``) gives the rows built.
Parquet statistics are kept only where they can prune a file."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from pipelines.ingest_plan import TableWrite
from pipelines.record import canonical, stored
from pipelines.record.rows import span_for_call
from pipelines.record.stored import CHANGE_DIGEST_CHARS, SAME_AS_SPAN_KEY, SHORT_CALL_ID_CHARS, with_call_values
from pipelines.resources.warehouse import Warehouse, to_arrow
from pipelines.retention.erasure import forget_user
from tests.rot.test_stored_checks import _call as call_row

AT = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
DAY = date(2026, 11, 20)
KEY = b"k" * 32


def _call(span_id: str, trace_id: str, user_id: str = "u-1") -> dict:
    return call_row(span_id, trace_id, user_id)


def _decision(call_id: str, trace_id: str, tier: str = "full") -> dict:
    row = {
        "call_id": call_id,
        "trace_id": trace_id,
        "occurred_date": DAY,
        "service": "support.answer",
        "tier": tier,
        "reasons": ["sampled"],
        "keep_probability": 0.5,
        "policy_version": "1",
        "decided_at": AT,
    }
    return {**row, "record_sha256": canonical.record_sha256(row, ())}


def _audit(call_id: str, trace_id: str, source_table: str = "calls", replacements: int = 1) -> dict:
    row = {
        "call_id": call_id,
        "source_table": source_table,
        "trace_id": trace_id,
        "occurred_date": DAY,
        "mode": "placeholder",
        "entity_counts": {"EMAIL_ADDRESS": replacements},
        "replacements": replacements,
        "fields": ["messages.parts.text"],
        "flags": [],
        "redacted_at": AT,
    }
    return {**row, "record_sha256": canonical.record_sha256(row, ("redacted_at",))}


def _short(row: dict) -> dict:
    return {**row, "record_sha256": row["record_sha256"][:CHANGE_DIGEST_CHARS]}


def test_side_tables_store_no_trace_id_their_call_says_and_read_back_whole(tmp_path):
    calls = [_call("s1", "trace-a"), _call("s2", "trace-a"), _call("s3", "trace-b")]
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", calls)
    decisions = [_decision(c["call_id"], c["trace_id"]) for c in calls]
    # a decision of a call `calls` does not hold keeps its trace id
    decisions.append(_decision("not-in-calls", "trace-z"))
    audit = [_audit(c["call_id"], c["trace_id"]) for c in calls]
    # a span's audit row has no call: it keeps its trace id, whether it replaced something or not
    audit += [_audit("span-key-1", "trace-a", "spans", 0), _audit("span-key-2", "trace-b", "spans", 2)]
    for name, rows in (("retention", decisions), ("redaction_audit", audit)):
        warehouse.merge(name, rows, partitions=[DAY])
        files = {r["call_id"]: r for r in pl.read_delta(warehouse.table_uri(name)).to_dicts()}
        # a row of a call in `calls` names it by the first digits of its id; any other keeps it whole
        for call in calls:
            assert files[call["call_id"][:SHORT_CALL_ID_CHARS]]["trace_id"] is None, name
        kept = [r for r in rows if r["call_id"] not in {c["call_id"] for c in calls}]
        assert kept and all(files[r["call_id"]]["trace_id"] == r["trace_id"] for r in kept)
        assert len(files) == len(rows)
        assert all(len(r["record_sha256"]) == CHANGE_DIGEST_CHARS for r in files.values())

        want = pl.DataFrame([_short(r) for r in rows]).select(pl.col("call_id"), pl.col("trace_id"), "record_sha256")
        read = warehouse.read(name).select("call_id", "trace_id", "record_sha256")
        assert read.sort("call_id").equals(want.sort("call_id")), name
        # every column as built (the digest short), for a reader through the warehouse...
        full = {r["call_id"]: r for r in warehouse.read(name).to_dicts()}
        for row in rows:
            got = full[row["call_id"]]
            assert all(got[k] == v for k, v in _short(row).items() if k not in ("entity_counts",)), name
        # ...and for one reading the Delta files with `calls` beside them
        direct = with_call_values(
            name, pl.scan_delta(warehouse.table_uri(name)), pl.scan_delta(warehouse.table_uri("calls"))
        ).collect()
        assert direct.sort("call_id").equals(warehouse.read(name).sort("call_id"))
        # a day's read takes its trace ids from that day's calls
        assert warehouse.read(name, pl.col("occurred_date") == DAY)["trace_id"].null_count() == 0
        # a re-run writes the same rows: no new version
        version = warehouse.version(name)
        assert not warehouse.merge(name, rows, partitions=[DAY]).committed
        assert warehouse.version(name) == version


def test_a_table_written_with_longer_change_digests_is_not_rewritten_for_them(tmp_path, monkeypatch):
    calls = [_call("s1", "trace-a")]
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", calls)
    decisions = [_decision(calls[0]["call_id"], "trace-a")]
    monkeypatch.setattr(stored, "CHANGE_DIGEST_CHARS", 16)
    warehouse.merge("retention", decisions, partitions=[DAY])
    assert len(pl.read_delta(warehouse.table_uri("retention"))["record_sha256"][0]) == 16
    monkeypatch.undo()
    version = warehouse.version("retention")
    # unchanged rows: the 16 stored digits begin with the 8 a merge brings now
    assert not warehouse.merge("retention", decisions, partitions=[DAY]).committed
    assert warehouse.version("retention") == version
    # a rewrite of rows as read (16 digits) still finds them unchanged since, and replaces them
    swept = warehouse.read("retention").with_columns(swept_at=pl.lit(AT).cast(pl.Datetime("us", "UTC")))
    assert warehouse.rewrite("retention", swept, partitions=[DAY]).updated == 1
    # a changed row is merged
    changed = [_decision(calls[0]["call_id"], "trace-a", tier="ingredients")]
    assert warehouse.merge("retention", changed, partitions=[DAY]).updated == 1
    assert warehouse.read("retention")["tier"].to_list() == ["ingredients"]


def test_erasure_deletes_the_side_rows_of_every_call_in_the_users_trace(tmp_path):
    # two users' calls in one trace: erasure removes the trace, and with it every row linked to it
    mine, theirs, other = _call("s1", "trace-a", "u-erased"), _call("s2", "trace-a", "u-other"), _call("s3", "trace-b")
    calls = [mine, theirs, other]
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", calls)
    warehouse.merge("retention", [_decision(c["call_id"], c["trace_id"]) for c in calls], partitions=[DAY])
    warehouse.merge("redaction_audit", [_audit(c["call_id"], c["trace_id"]) for c in calls], partitions=[DAY])
    assert pl.read_delta(warehouse.table_uri("retention"))["trace_id"].null_count() == 3
    # a call's own span that says more is stored, its call id as "=": linked by that call id alone
    span = {**span_for_call(mine, step_index=1), "user_id": None, "session_id": None, "trace_id": "trace-q"}
    warehouse.merge("spans", [span])
    assert pl.read_delta(warehouse.table_uri("spans"))["call_id"].to_list() == [SAME_AS_SPAN_KEY]

    report = forget_user(warehouse, "u-erased", key=KEY, requested_by="DSR-1", now=AT)

    assert {k: v for k, v in report.rows_deleted.items() if v} == {
        "calls": 2, "spans": 1, "retention": 2, "redaction_audit": 2,
    }  # fmt: skip
    assert report.rows_remaining == 0
    for name in ("calls", "retention", "redaction_audit"):
        assert warehouse.read(name)["call_id"].to_list() == [other["call_id"]], name
    assert pl.read_delta(warehouse.table_uri("spans")).height == 0


def test_parquet_statistics_only_where_a_filter_can_skip_a_file(tmp_path):
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", [_call("s1", "trace-a"), _call("s2", "trace-b")])
    (path,) = [p for p in Path(warehouse.table_uri("calls")).rglob("*.parquet") if "_delta_log" not in p.parts]
    group = pq.ParquetFile(path).metadata.row_group(0)
    with_min_max = {
        group.column(i).path_in_schema
        for i in range(group.num_columns)
        if group.column(i).statistics is not None and group.column(i).statistics.has_min_max
    }
    # times, labels and what `tracelake maintain` z-orders by (trace_id) keep theirs
    assert {"occurred_at", "ended_at", "status", "latency_ms", "trace_id"} <= with_min_max
    assert not with_min_max & {"call_id", "record_sha256", "request_json", "system_text", "session_id", "user_id"}
    # a filter on a time still skips files by the log's statistics
    assert warehouse.read("calls", pl.col("occurred_at") > AT + timedelta(days=1)).height == 0


def test_traces_are_stored_in_time_order_and_read_back_the_same(tmp_path):
    starts = [AT + timedelta(minutes=m) for m in (30, 5, 17, 0)]
    rows = [
        {"trace_id": f"trace-{i}", "occurred_date": DAY, "started_at": s, "ended_at": s + timedelta(seconds=2)}
        for i, s in enumerate(starts)
    ]
    rows = [{**r, "record_sha256": canonical.record_sha256(r, ())} for r in rows]
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("traces", rows, partitions=[DAY])
    # in the file, a row's times follow the previous row's (they compress to small differences)
    assert pl.read_delta(warehouse.table_uri("traces"))["started_at"].to_list() == sorted(starts)
    read = warehouse.read("traces").sort("trace_id")
    assert read["trace_id"].to_list() == [r["trace_id"] for r in rows]
    assert read["started_at"].to_list() == starts


def test_ingest_leaves_out_audit_trace_ids_against_the_calls_it_wrote(tmp_path):
    # a shard's plan writes its calls, then their audit rows against those calls only:
    # a call of another shard (stored, not in this plan) keeps its audit row's trace id
    ours, theirs = _call("s1", "trace-a"), _call("s2", "trace-b")
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", [ours, theirs])
    audit = [_audit(c["call_id"], c["trace_id"]) for c in (ours, theirs)]
    write = TableWrite("redaction_audit", audit, {DAY}, None, False, to_arrow("calls", [ours]))
    assert write.merge_into(warehouse).inserted == 2

    files = {r["call_id"]: r["trace_id"] for r in pl.read_delta(warehouse.table_uri("redaction_audit")).to_dicts()}
    # both calls are stored: both rows name their call by a prefix
    assert files == {ours["call_id"][:SHORT_CALL_ID_CHARS]: None, theirs["call_id"][:SHORT_CALL_ID_CHARS]: "trace-b"}
    read = {r["call_id"]: r["trace_id"] for r in warehouse.read("redaction_audit").to_dicts()}
    assert read == {ours["call_id"]: "trace-a", theirs["call_id"]: "trace-b"}
    assert not write.merge_into(warehouse).committed
