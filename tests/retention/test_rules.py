"""Each always-keep rule, checked against realistic demo traces: every call the
rule describes (computed here independently of the implementation) is kept in
full with the rule among its reasons, and so is the rest of its trace."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from datetime import UTC, datetime

import numpy as np
import polars as pl
import pytest

from pipelines.resources.warehouse import Warehouse
from pipelines.retention.inputs import decide_day
from pipelines.retention.policy import load_policy, parse_policy
from tests.retention.environment import DAYS

NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
NEGATIVE = {"down", "thumbs_down", "negative", "bad", "unhelpful"}


def decide_all(warehouse: Warehouse, policy=None, now: datetime = NOW) -> pl.DataFrame:
    policy = policy or load_policy()
    return pl.concat([decide_day(warehouse, day, policy, now) for day in DAYS])


@pytest.fixture(scope="module")
def golden(demo) -> Warehouse:
    return Warehouse(uri=str(demo.root / "warehouse"))


@pytest.fixture(scope="module")
def calls(golden) -> list[dict]:
    return golden.read("calls").to_dicts()


@pytest.fixture(scope="module")
def decisions(golden) -> dict[str, dict]:
    return {row["call_id"]: row for row in decide_all(golden).to_dicts()}


def _tail(calls: list[dict], value) -> set[str]:
    """Calls above the 99th percentile of their route's values that day (routes with >= 20 values)."""
    groups = defaultdict(list)
    for c in calls:
        if value(c) is not None:
            groups[(c["service"], c["occurred_date"])].append(c)
    out = set()
    for members in groups.values():
        values = np.array([value(c) for c in members], dtype=float)
        if len(values) < 20:
            continue
        threshold = np.percentile(values, 99)  # linear interpolation, numpy's default
        out |= {c["call_id"] for c in members if value(c) > threshold}
    return out


def _cost(call: dict) -> float | None:
    return (call["usage"] or {}).get("cost_usd")


CALL_RULES = {
    "error": lambda c: c["status"] == "error",
    "negative_feedback": lambda c: any(
        (f["value_string"] or "").lower() in NEGATIVE or (f["name"] == "thumbs" and (f["value_number"] or 1) <= 0)
        for f in c["feedback"] or []
    ),
    "low_eval_score": lambda c: c["eval_score"] is not None and c["eval_score"] < 3.0,
    "latency_over_limit": lambda c: c["latency_ms"] > 10_000,
    "cost_over_limit": lambda c: (_cost(c) or 0.0) > 0.50,
    "segment:vip": lambda c: (c["segment"] or {}).get("user_tier") == "vip",
    "escalated": lambda c: bool(c["escalated"]),
    "guardrail_hit": lambda c: bool(c["guardrail_hit"]),
}


def _assert_rule_keeps(rule: str, expected: set[str], calls: list[dict], decisions: dict[str, dict]) -> None:
    assert expected, f"the demo data has no call for rule {rule}; the test would prove nothing"
    matched = {cid for cid, d in decisions.items() if rule in d["reasons"]}
    assert matched == expected
    by_trace = defaultdict(list)
    for c in calls:
        by_trace[c["trace_id"]].append(c["call_id"])
    for call_id in expected:
        d = decisions[call_id]
        assert d["tier"] == "full" and d["keep_probability"] == 1.0
        for other in by_trace[d["trace_id"]]:
            assert decisions[other]["tier"] == "full"
            assert rule in decisions[other]["reasons"] or f"trace:{rule}" in decisions[other]["reasons"]


@pytest.mark.parametrize("rule", sorted(CALL_RULES))
def test_call_rule_keeps_its_calls_and_their_traces(rule, calls, decisions):
    expected = {c["call_id"] for c in calls if CALL_RULES[rule](c)}
    _assert_rule_keeps(rule, expected, calls, decisions)


def test_latency_tail_is_per_route_and_day(calls, decisions):
    _assert_rule_keeps("latency_tail", _tail(calls, lambda c: c["latency_ms"]), calls, decisions)


def test_cost_tail_is_per_route_and_day(calls, decisions):
    _assert_rule_keeps("cost_tail", _tail(calls, _cost), calls, decisions)


def test_a_session_that_ends_with_a_thumbs_down_keeps_every_call(golden, calls, decisions):
    traces = golden.read("traces").filter(pl.col("negative_feedback"))
    call_level = {c["trace_id"] for c in calls if CALL_RULES["negative_feedback"](c)}
    # sessions whose only thumbs-down is on the session.end event, not on any call
    session_only = set(traces["trace_id"]) - call_level
    assert session_only
    in_sessions = [d for d in decisions.values() if d["trace_id"] in session_only]
    assert len(in_sessions) >= 2 * len(session_only)  # agent sessions: several calls each
    assert all(d["tier"] == "full" and "trace:negative_feedback" in d["reasons"] for d in in_sessions)


def test_a_failed_tool_keeps_its_session(golden, calls, decisions):
    failed = set(golden.read("traces").filter(pl.col("error_count") > 0)["trace_id"])
    call_errors = {c["trace_id"] for c in calls if c["status"] == "error"}
    tool_only = failed - call_errors
    assert tool_only
    assert all(
        d["tier"] == "full" and "trace:error" in d["reasons"] for d in decisions.values() if d["trace_id"] in tool_only
    )


def test_a_call_flagged_by_a_later_check_is_kept(warehouse):
    before = {d["call_id"]: d for d in decide_all(warehouse).to_dicts()}
    target = next(d for d in before.values() if d["tier"] == "ingredients")
    row = warehouse.read("calls", pl.col("call_id") == target["call_id"]).to_dicts()[0]
    row.update(flags=["rot:template_drift"], record_sha256="changed-by-a-check")
    warehouse.merge("calls", [row], partitions=[row["occurred_date"]])

    after = {d["call_id"]: d for d in decide_all(warehouse).to_dicts()}
    assert after[target["call_id"]]["tier"] == "full"
    assert "flagged" in after[target["call_id"]]["reasons"]
    ignoring = parse_policy({"version": 2, "always_keep": {"ignore_flags": ["rot:template_drift"]}})
    again = {d["call_id"]: d for d in decide_all(warehouse, ignoring).to_dicts()}
    assert "flagged" not in again[target["call_id"]]["reasons"]


def _u(trace_id: str, salt: str = "") -> float:
    return int.from_bytes(hashlib.sha256(f"{salt}:{trace_id}".encode()).digest()[:8], "big") / 2**64


def test_the_rest_is_sampled_by_a_hash_of_the_trace_id(decisions):
    rest = [d for d in decisions.values() if not [r for r in d["reasons"] if r != "sampled"]]
    assert len(rest) > 500
    for d in rest:
        assert d["keep_probability"] == pytest.approx(0.10)
        assert (d["tier"] == "full") == (_u(d["trace_id"]) < 0.10)
        assert (d["reasons"] == ["sampled"]) == (d["tier"] == "full")
    share = sum(d["tier"] == "full" for d in rest) / len(rest)
    assert 0.05 < share < 0.16


def test_strata_carry_their_own_rates(golden):
    policy = parse_policy(
        {
            "version": "strata-test",
            "strata": {
                "rates": [
                    {"match": {"route": "support.triage"}, "rate": 1.0},
                    {"match": {"language": "pt-BR", "input_bucket": "<256"}, "rate": 0.0},
                ]
            },
        }
    )
    decided = decide_all(golden, policy)
    rest = decided.filter(~pl.col("reasons").list.eval(pl.element() != "sampled").list.any())
    triage = rest.filter(pl.col("service") == "support.triage")
    short_pt = rest.filter(
        (pl.col("service") == "support.answer") & (pl.col("language") == "pt-BR") & (pl.col("input_bucket") == "<256")
    )
    assert triage.height > 10 and short_pt.height > 10
    assert (triage["tier"] == "full").all() and (triage["keep_probability"] == 1.0).all()
    assert (short_pt["tier"] == "ingredients").all() and (short_pt["keep_probability"] == 0.0).all()
    assert set(decided["policy_version"]) == {"strata-test"}


def test_deciding_again_gives_identical_results(golden, decisions):
    again = decide_all(golden, now=datetime(2027, 1, 1, tzinfo=UTC))
    assert again.height == len(decisions)
    for row in again.to_dicts():
        first = decisions[row["call_id"]]
        assert {k: v for k, v in row.items() if k != "decided_at"} == {
            k: v for k, v in first.items() if k != "decided_at"
        }


def test_a_sessions_calls_always_share_a_tier(decisions):
    tiers = defaultdict(set)
    sizes = defaultdict(int)
    for d in decisions.values():
        tiers[d["trace_id"]].add(d["tier"])
        sizes[d["trace_id"]] += 1
    assert all(len(t) == 1 for t in tiers.values())
    # and it is the trace that decides: sessions where one call hit a rule and the others did not
    inherited = [d for d in decisions.values() if any(r.startswith("trace:") for r in d["reasons"])]
    assert len(inherited) > 20
    assert max(sizes.values()) >= 3
