"""Sampling and escalation, the incident switch, calibration and rates."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from pipelines.judge.calibration import calibration_rows, kappa
from pipelines.judge.findings import finding
from pipelines.judge.llm_judge import Judgement
from pipelines.judge.policy import Incident, PolicyError, load_policy
from pipelines.judge.rates import class_rates
from pipelines.judge.sampling import select
from pipelines.judge.timeline import Step, Trace

POLICY = load_policy()
AT = datetime(2026, 11, 20, 10, tzinfo=UTC)


def _trace(i: int, **step_fields) -> Trace:
    step = Step(f"t{i}", None, f"k{i}", f"s{i}", None, "llm.call", AT, 0, "x", **step_fields)
    return Trace(f"t{i}", None, [step])


def test_five_percent_by_a_stable_hash_and_everything_flagged():
    traces = [_trace(i) for i in range(4000)]
    flagged = [
        _trace(5000, feedback_negative=True),
        _trace(5001, status="error"),
        _trace(5002, escalated=True),
        _trace(5003),
    ]
    findings = [finding(flagged[3], flagged[3].steps[0], "truncated", "truncated", "1", "cut")]
    picked = select(traces + flagged, findings, POLICY)
    share = sum(picked[t.trace_id].judged for t in traces) / len(traces)
    assert 0.04 < share < 0.06 and {picked[t.trace_id].probability for t in traces} == {0.05}
    assert select(traces, [], POLICY) == {t: s for t, s in picked.items() if t in {x.trace_id for x in traces}}
    assert [picked[t.trace_id].reasons for t in flagged] == [
        ("negative_feedback",),
        ("error",),
        ("escalated",),
        ("heuristic_finding",),
    ]
    assert all(picked[t.trace_id].probability == 1.0 and picked[t.trace_id].judged for t in flagged)


def test_the_incident_switch_judges_everything_on_or_within_its_window(tmp_path):
    policy = tmp_path / "judge.yaml"
    policy.write_text(
        "version: incident-1\nsampling:\n  incident:\n    windows:\n"
        "      - {start: '2026-11-20T09:00:00Z', end: '2026-11-20T12:00:00Z', reason: INC-7}\n"
    )
    loaded = load_policy(policy)
    traces = [_trace(i) for i in range(200)]
    assert all(s.judged and s.probability == 1.0 for s in select(traces, [], loaded).values())
    later = Step("late", None, "k", "s", None, "llm.call", AT.replace(hour=13), 0, "x")
    assert select([Trace("late", None, [later])], [], loaded)["late"].probability == 0.05
    on = POLICY.model_copy(update={"sampling": POLICY.sampling.model_copy(update={"incident": Incident(enabled=True)})})
    assert on.incident_on(AT) and loaded.version == "incident-1" and len(loaded.sha256) == 64


def test_a_bad_policy_names_the_file_and_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: x\nsampling:\n  base_rate: 2\n")
    with pytest.raises(PolicyError, match=r"bad.yaml: key 'sampling.base_rate'"):
        load_policy(bad)


def test_kappa_and_calibration_rows_count_what_they_compare():
    assert kappa([("a", "a"), ("b", "b"), ("a", "a"), ("b", "b")]) == pytest.approx(1.0)
    assert kappa([("a", "a")] * 3) is None  # one category: undefined, not 1
    assert kappa([("a", "b"), ("b", "a"), ("a", "b"), ("b", "a")]) == pytest.approx(-1.0)

    def j(trace, sample, label):
        return Judgement(trace, "hallucination_detected", "sha", "v1", sample, label, 0.9, True)

    judgements = [j("t1", 0, "hallucination_detected"), j("t1", 1, "hallucination_detected")]
    judgements += [j("t2", 0, "no_error"), j("t2", 1, "no_error"), j("t3", 0, "no_error"), j("t4", 0, "judge_error")]
    rows = calibration_rows(judgements, {"t1": True, "t3": True, "t4": False}, date(2026, 11, 20), AT)
    by = {r["check"]: r for r in rows}
    assert (by["self_agreement"]["items"], by["self_agreement"]["agreements"]) == (2, 2)
    assert by["self_agreement"]["kappa"] == pytest.approx(1.0)
    assert (by["human_feedback"]["items"], by["human_feedback"]["agreements"]) == (2, 1)
    assert by["human_feedback"]["judge_errors"] == 1 and by["human_feedback"]["judged"] == 4


def test_rates_weigh_judge_findings_by_the_inverse_probability():
    findings = [{"error_class": "hallucination_detected", "trace_id": "a", "judged_with_probability": 0.05}]
    findings += [{"error_class": "truncated", "trace_id": t, "judged_with_probability": 1.0} for t in "bcd"]
    rates = {r.error_class: r for r in class_rates(findings, 100)}
    assert rates["hallucination_detected"].estimated == pytest.approx(20.0) and rates["truncated"].rate == 0.03
    assert rates["truncated"].low < 0.03 < rates["truncated"].high
