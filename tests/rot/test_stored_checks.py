"""What `rot_checks` stores against what its readers get back: the Delta files leave
out the call's recorded hash and trace id (they are in `calls`) and a re-rendered
hash equal to the recorded one; every reader through the warehouse sees the rows
the check built."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import polars as pl

from pipelines.debug.tables import latest_rot_check
from pipelines.query import run_query
from pipelines.record import canonical
from pipelines.record.rows import finalize_call, new_call
from pipelines.record.stored import NOT_RERENDERED, RERENDERED_DIGEST_CHARS, SHORT_CALL_ID_CHARS, rot_checks_with_calls
from pipelines.resources.warehouse import Warehouse
from pipelines.rot.check import RotCheck
from pipelines.rot.ingredients import Ingredients
from pipelines.rot.store_files import ModelsConfig, ParamsConfig
from pipelines.rot.table import LATEST_STATUS_SQL, latest_status, rot_rates, rot_rows

AT = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
DAY = date(2026, 11, 20)
CHECKED = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)
LATER = CHECKED + timedelta(days=1)
INGREDIENTS = Ingredients({}, "kb-1", {}, ModelsConfig(version=1, aliases={}), ParamsConfig(version=1, routes={}))


def _call(span_id: str, trace_id: str | None = None, user_id: str | None = None) -> dict:
    body = {"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": [{"role": "user", "content": span_id}]}
    call = new_call(
        source_format="frozen_call",
        trace_id=trace_id or f"trace-{span_id}",
        span_id=span_id,
        user_id=user_id,
        occurred_at=AT,
        ended_at=AT + timedelta(milliseconds=850),
        request_model="claude-sonnet-4-6",
        status="ok",
        request_json=canonical.canonical_json(body),
        rendered_request_sha256=canonical.request_sha256(body),
    )
    return finalize_call(call)


def _check(call: dict, status: str, rerendered: str | None, **changes) -> RotCheck:
    fields = {
        "call_id": call["call_id"],
        "trace_id": call["trace_id"],
        "service": "support.answer",
        "occurred_date": DAY,
        "status": status,
        "recorded_sha256": call["rendered_request_sha256"],
        "rerendered_sha256": rerendered,
        **changes,
    }
    return RotCheck(**fields)


def test_rot_checks_store_what_calls_do_not_say_and_read_back_whole(tmp_path):
    calls = [_call(s) for s in ("verified", "rotted", "unverifiable", "impure")]
    verified, rotted, unverifiable, impure = calls
    orphan = {**_call("orphan"), "call_id": "not-in-calls"}
    checks = [
        _check(verified, "verified", verified["rendered_request_sha256"], replay_fidelity="exact"),
        _check(rotted, "rotted", "ab" * 32, components=["template_changed"]),
        _check(unverifiable, "unverifiable", None, missing=["template_version"]),
        # an impure template can re-render the recorded bytes: equal, yet not verified
        _check(impure, "impure", impure["rendered_request_sha256"]),
        # a check of a call `calls` does not hold keeps everything
        _check(orphan, "rotted", "cd" * 32),
        # a check whose call changed since: its values are kept, not taken from calls
        _check(rotted, "rotted", "ef" * 32, call_id=rotted["call_id"], recorded_sha256="01" * 32, trace_id="t-x"),
    ]
    first, second = (
        rot_rows(checks[:5], INGREDIENTS, CHECKED, "run-1"),
        rot_rows(checks[5:], INGREDIENTS, LATER, "run-2"),
    )
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    warehouse.merge("calls", calls)
    warehouse.merge("rot_checks", first, partitions=[CHECKED.date()])
    warehouse.merge("rot_checks", second, partitions=[LATER.date()])
    built = {(r["call_id"], r["checked_at"]): r for r in first + second}

    raw = pl.read_delta(warehouse.table_uri("rot_checks"))
    stored = {(r["call_id"], r["checked_at"]): r for r in raw.to_dicts()}
    # a check of a call in `calls` names it by the first digits of its id; the orphan's keeps it whole
    short = {c["call_id"]: c["call_id"][:SHORT_CALL_ID_CHARS] for c in calls}
    key = lambda call, at=CHECKED: (short.get(call["call_id"], call["call_id"]), at)  # noqa: E731
    assert ("not-in-calls", CHECKED) in stored and len(stored) == len(first + second)
    for call in calls:
        assert stored[key(call)]["recorded_sha256"] is None and stored[key(call)]["trace_id"] is None
    assert stored[key(verified)]["rerendered_sha256"] is None
    assert stored[key(impure)]["rerendered_sha256"] is None
    assert stored[key(unverifiable)]["rerendered_sha256"] == NOT_RERENDERED
    # a re-rendered hash other than the recorded one keeps its first digits
    assert stored[key(rotted)]["rerendered_sha256"] == ("ab" * 32)[:RERENDERED_DIGEST_CHARS]
    assert stored[key(orphan)]["recorded_sha256"] == orphan["rendered_request_sha256"]
    assert stored[key(orphan)]["trace_id"] == orphan["trace_id"]
    changed = stored[key(rotted, LATER)]
    assert (changed["recorded_sha256"], changed["trace_id"]) == ("01" * 32, "t-x")

    # through the warehouse, every column is what the check built (digests that only say
    # "changed" or "other bytes" by their first digits)
    short = ("record_sha256", "rerendered_sha256")
    for row in warehouse.read("rot_checks").to_dicts():
        want = built[(row["call_id"], row["checked_at"])]
        assert {k: v for k, v in row.items() if k not in short} == {k: v for k, v in want.items() if k not in short}
        assert want["record_sha256"].startswith(row["record_sha256"])
        assert (want["rerendered_sha256"] or "").startswith(row["rerendered_sha256"] or "")
        assert (row["rerendered_sha256"] == want["recorded_sha256"]) == (
            want["rerendered_sha256"] == want["recorded_sha256"]
        )
    # and so for a query engine reading the Delta files with the calls table beside them
    direct = rot_checks_with_calls(
        pl.scan_delta(warehouse.table_uri("rot_checks")), pl.scan_delta(warehouse.table_uri("calls"))
    ).collect()
    assert direct.sort("call_id", "checked_at").equals(warehouse.read("rot_checks").sort("call_id", "checked_at"))

    # readers: the debug view of a call, replay's day inputs, SQL, rot rates
    latest = latest_rot_check(warehouse, verified["call_id"])
    assert latest["rerendered_sha256"] == latest["recorded_sha256"] == verified["rendered_request_sha256"]
    assert latest["trace_id"] == verified["trace_id"]
    assert latest_rot_check(warehouse, unverifiable["call_id"])["rerendered_sha256"] is None
    day = warehouse.read(
        "rot_checks", pl.col("occurred_date") == DAY, ["call_id", "trace_id", "recorded_sha256", "rerendered_sha256"]
    )
    assert day.height == len(built) and day["recorded_sha256"].null_count() == 0
    sql = run_query(LATEST_STATUS_SQL, {"rot_checks": warehouse.scan("rot_checks")}, 100).frame
    assert sql.filter(pl.col("call_id") == rotted["call_id"])["recorded_sha256"].to_list() == ["01" * 32]
    rates = rot_rates(latest_status(warehouse.scan("rot_checks")))
    assert rates["checked"].sum() == 5

    # a re-run writes the same verdicts: no new version
    version = warehouse.version("rot_checks")
    assert not warehouse.merge("rot_checks", first, partitions=[CHECKED.date()]).committed
    assert warehouse.version("rot_checks") == version
