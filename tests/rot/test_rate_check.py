"""The rot-rate asset check: quiet while a route's rot rate is flat, a WARN the
night an index rebuild rots a route's calls."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg

from assets.rot import rot_checks, rot_rate_jump
from pipelines.demo import stores as demo
from pipelines.resources.warehouse import Warehouse
from pipelines.rot.table import rate_jumps, rot_rates
from tests.rot.conftest import CAPTURED, StoreAt, fresh_stores, support_call

DAYS = [CAPTURED.date() - timedelta(days=n) for n in (3, 2, 1, 0)]


def test_a_route_whose_rot_rate_jumps_gets_a_warning(tmp_path, instance):
    stores = fresh_stores()
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    calls = []
    for day in DAYS:
        when = CAPTURED.replace(year=day.year, month=day.month, day=day.day)
        calls += [
            support_call(stores, doc_ids=(demo.CHANGED_DOC,), span_id=f"{day}-{i}", occurred_at=when.isoformat())
            for i in range(24)
        ]
    warehouse.merge("calls", calls)
    store = StoreAt(str(tmp_path / "stores"))
    store.put(stores)
    resources = {"warehouse": warehouse, **store.resources()}

    def run(day):
        result = dg.materialize(
            [rot_checks, rot_rate_jump], resources=resources, partition_key=day.isoformat(), instance=instance
        )
        assert result.success
        return result.get_asset_check_evaluations()[0]

    for day in DAYS[:-1]:  # nights with stores as they were: nothing rots
        evaluation = run(day)
        assert evaluation.passed
    rebuilt = fresh_stores()
    rebuilt.snapshots["kb-rebuilt"] = {**rebuilt.snapshots[demo.KB_SNAPSHOT], demo.CHANGED_DOC: "Refunds: 7 days."}
    rebuilt.current_snapshot = "kb-rebuilt"
    store.put(rebuilt)  # the index is rebuilt before the last night's run
    evaluation = run(DAYS[-1])
    assert not evaluation.passed
    assert evaluation.severity == dg.AssetCheckSeverity.WARN
    assert evaluation.metadata["routes_jumped"].value == 1
    assert "support.answer" in evaluation.description


def test_rate_jumps_needs_history_volume_and_a_real_increase():
    import polars as pl

    def frame(rows):
        return rot_rates(
            pl.DataFrame(rows, schema={"service": pl.String, "occurred_date": pl.Date, "status": pl.String})
        )

    day = DAYS[-1]
    history = [("r", d, "verified") for d in DAYS[:-1] for _ in range(30)] + [("r", DAYS[0], "rotted")] * 3
    jump = [("r", day, "rotted")] * 15 + [("r", day, "verified")] * 15
    assert rate_jumps(frame(history + jump), day)["service"].to_list() == ["r"]
    small = [("r", day, "rotted")] * 5 + [("r", day, "verified")] * 5  # too few calls to judge
    assert rate_jumps(frame(history + small), day).is_empty()
    flat = [("r", day, "rotted")] * 1 + [("r", day, "verified")] * 29
    assert rate_jumps(frame(history + flat), day).is_empty()
    assert rate_jumps(frame(jump), day).is_empty()  # no history: nothing to jump from
