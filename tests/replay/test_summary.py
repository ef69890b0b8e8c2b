"""The per-segment summary: intervals, tests, reweighting, the hidden-regression
flag, and that fidelities and modes are never mixed."""

from __future__ import annotations

from datetime import date

import pytest
from scipy.stats import binomtest
from statsmodels.stats.proportion import proportion_confint

from pipelines.replay.sampling import SEGMENT_FIELDS, segment_key, stratified_sample
from pipelines.replay.summary import summarize

DAY = date(2026, 11, 20)


def rows_for(segment: dict, verdicts: dict[str, int], fidelity="exact", mode="diff", p=1.0, cost=0.001):
    out = []
    for verdict, count in verdicts.items():
        out += [
            {
                "mode": mode,
                "fidelity": fidelity,
                "segment": segment,
                "segment_key": segment_key(segment),
                "verdict": verdict,
                "inclusion_probability": p,
                "cost_usd": cost,
                "input_tokens": 10,
                "output_tokens": 5,
                "simulated": True,
            }
        ] * count
    return out


PT = {"service": "support.answer", "language": "pt-BR", "user_tier": "free", "length": "short"}
EN_LONG = {"service": "support.answer", "language": "en", "user_tier": "free", "length": "long"}
EN_SHORT = {"service": "support.answer", "language": "en", "user_tier": "free", "length": "short"}


def by_segment(summary, fidelity="exact"):
    return {r["segment_key"]: r for r in summary if r["fidelity"] == fidelity}


def test_aggregate_improves_while_a_segment_significantly_regresses_is_flagged():
    rows = (
        rows_for(PT, {"improved": 30, "same": 10})
        + rows_for(EN_SHORT, {"improved": 12, "same": 28})
        + rows_for(EN_LONG, {"regressed": 14, "same": 2})
    )
    summary = by_segment(summarize(rows, "v4", DAY))
    total = summary["all"]
    assert total["delta"] > 0 and total["aggregate_improves"]
    assert total["hides_regression"] and total["regressed_segments"] == [segment_key(EN_LONG)]
    long_en = summary[segment_key(EN_LONG)]
    assert long_en["significant_regression"] and not summary[segment_key(PT)]["significant_regression"]
    assert long_en["sign_test_p"] == pytest.approx(binomtest(0, 14, 0.5).pvalue)
    assert long_en["bh_p"] >= long_en["sign_test_p"]
    low, high = proportion_confint(14, 16, alpha=0.05, method="wilson")
    assert (long_en["regressed_low"], long_en["regressed_high"]) == pytest.approx((low, high))
    assert long_en["delta_low"] <= long_en["delta"] <= long_en["delta_high"]
    assert total["cost_usd"] == pytest.approx(96 * 0.001)


def test_no_flag_when_no_segment_regresses_significantly():
    rows = rows_for(PT, {"improved": 30, "same": 10}) + rows_for(EN_LONG, {"regressed": 1, "same": 15})
    summary = by_segment(summarize(rows, "v4", DAY))
    assert summary["all"]["aggregate_improves"] and not summary["all"]["hides_regression"]


def test_fidelities_and_modes_are_summarized_apart():
    rows = (
        rows_for(PT, {"improved": 5})
        + rows_for(PT, {"regressed": 7}, fidelity="approximate")
        + rows_for(PT, {"same": 3}, mode="capture")
    )
    summary = summarize(rows, "v4", DAY)
    groups = {(r["mode"], r["fidelity"], r["segment_key"]): r for r in summary}
    assert groups[("diff", "exact", "all")]["n"] == 5 and groups[("diff", "exact", "all")]["regressed"] == 0
    assert groups[("diff", "approximate", "all")]["n"] == 7 and groups[("diff", "approximate", "all")]["improved"] == 0
    assert groups[("capture", "exact", "all")]["same"] == 3


def test_aggregate_reweights_by_inverse_inclusion_probability():
    # PT sampled completely, EN at one in ten: EN's regressions count ten times in the aggregate
    rows = rows_for(PT, {"improved": 10}, p=1.0) + rows_for(EN_SHORT, {"regressed": 10}, p=0.1)
    total = by_segment(summarize(rows, "v4", DAY))["all"]
    assert total["weight"] == pytest.approx(110)
    assert total["improved_share"] == pytest.approx(10 / 110)
    assert total["regressed_share"] == pytest.approx(100 / 110)
    assert total["delta"] < 0 and not total["aggregate_improves"]


def test_stratified_sample_caps_each_stratum_and_stores_inclusion_probability():
    calls = [
        {"call_id": f"c{i}", "service": "s", "segment": {"language": "en" if i < 30 else "pt-BR", "user_tier": "free"}}
        for i in range(40)
    ]
    picked = stratified_sample(calls, per_stratum=5, salt="cand|2026-11-20")
    by = {}
    for s in picked:
        by.setdefault(s.segment_key, []).append(s)
    assert {k: len(v) for k, v in by.items()} == {"s/en/free/short": 5, "s/pt-BR/free/short": 5}
    assert {s.inclusion_probability for s in by["s/en/free/short"]} == {5 / 30}
    assert {s.inclusion_probability for s in by["s/pt-BR/free/short"]} == {5 / 10}
    again = stratified_sample(list(reversed(calls)), per_stratum=5, salt="cand|2026-11-20")
    assert {s.call["call_id"] for s in again} == {s.call["call_id"] for s in picked}
    other = stratified_sample(calls, per_stratum=5, salt="other|2026-11-20")
    assert {s.call["call_id"] for s in other} != {s.call["call_id"] for s in picked}
    assert set(picked[0].segment) == set(SEGMENT_FIELDS)
