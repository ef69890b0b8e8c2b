"""The window view: every day replayed so far pooled per candidate, with the verdict as
checks that name the segments, cost per call for candidate and baseline, and examples."""

from __future__ import annotations

from datetime import date, timedelta

from pipelines.replay.sampling import segment_key
from pipelines.replay.summary import summarize
from pipelines.replay.window import HIDES_REGRESSION, MOSTLY_APPROX, OVER_BUDGET, SEGMENT_REGRESSES, checks, pool
from tests.replay.test_summary import EN_LONG, EN_SHORT, PT, rows_for

DAY = date(2026, 11, 20)


def dated(rows, day, first=0):
    out = []
    for i, r in enumerate(rows, start=first):
        out.append(
            {
                **r,
                "day": day,
                "call_id": f"c{i}",
                "replay_id": f"r{i}",
                "request_key": f"new{i}",
                "baseline_request_key": f"old{i}",
                "old_output": "Seu pedido foi enviado ontem e chega amanhã. " * 6,
                "new_output": "Your order" if r["verdict"] == "regressed" else "Seu pedido saiu hoje.",
                "decided_by": "finish_reason",
            }
        )
    return out


def three_days():
    """A regression in long English calls that no single day shows as significant."""
    rows = []
    for i in range(3):
        day = DAY - timedelta(days=2 - i)
        day_rows = (
            rows_for(PT, {"improved": 10, "same": 4})
            + rows_for(EN_SHORT, {"improved": 4, "same": 9})
            + rows_for(EN_LONG, {"regressed": 4, "same": 1})
        )
        rows += dated(day_rows, day, first=len(rows))
    return rows


def test_pooling_the_window_finds_a_hidden_regression_no_single_day_shows():
    rows = three_days()
    for day in {r["day"] for r in rows}:
        assert not any(s["hides_regression"] for s in summarize([r for r in rows if r["day"] == day], "v4", day))
    costs = {f"new{i}": 0.003 for i in range(len(rows))} | {f"old{i}": 0.001 for i in range(len(rows))}
    view = pool(rows, "v4", costs)
    assert view.days == sorted({r["day"] for r in rows}) and len(view.days) == 3
    assert view.hidden == [segment_key(EN_LONG)] and view.verdict().startswith("DO NOT SHIP")
    long_en = next(r for r in view.summary if r["segment_key"] == segment_key(EN_LONG))
    assert long_en["n"] == 15 and long_en["delta_low"] <= long_en["delta"] <= long_en["delta_high"] < 0
    assert long_en["bh_p"] >= long_en["sign_test_p"]  # corrected across the window's segments
    assert view.cost["candidate_usd_per_call"] == 0.003 and view.cost["baseline_usd_per_call"] == 0.001
    assert view.fidelity == {"exact": len(rows)}
    assert [e["segment_key"] for e in view.examples[:1]] == [segment_key(EN_LONG)]
    assert all(len(e["old_output"]) <= 160 for e in view.examples)

    outcome = {o.name: o for o in checks(view, budget_usd=0.01)}
    hidden = outcome[HIDES_REGRESSION]
    assert not hidden.passed and segment_key(EN_LONG) in hidden.description and "BH p=" in hidden.description
    assert not outcome[SEGMENT_REGRESSES].passed
    assert outcome[MOSTLY_APPROX].passed
    assert not outcome[OVER_BUDGET].passed and "$0.0100" in outcome[OVER_BUDGET].description


def test_a_window_without_regressions_passes_and_mostly_approximate_fails():
    rows = dated(
        rows_for(PT, {"improved": 12, "same": 3}, fidelity="approximate") + rows_for(EN_SHORT, {"same": 5}), DAY
    )
    view = pool(rows, "v5")
    outcome = {o.name: o for o in checks(view, budget_usd=None)}
    assert outcome[HIDES_REGRESSION].passed and outcome[SEGMENT_REGRESSES].passed and outcome[OVER_BUDGET].passed
    assert not outcome[MOSTLY_APPROX].passed and "15 of 20" in outcome[MOSTLY_APPROX].description
    assert view.cost["candidate_usd_per_call"] is None and not view.examples
