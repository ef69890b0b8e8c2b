"""Each planted class at its planted step, and nothing else; clean sessions give no finding."""

from __future__ import annotations

from pipelines.judge import heuristics
from pipelines.judge.policy import load_policy
from pipelines.judge.timeline import Step, Trace
from tests.judge.sessions import clean_sessions, planted_sessions, violating_sessions

POLICY = load_policy()


def _of(traces: dict[str, Trace], ids) -> list[Trace]:
    return [traces[i] for i in ids]


def test_every_planted_class_is_found_at_its_step_and_nothing_else(traces):
    planted = planted_sessions()
    clean = [s.trace_id for s in clean_sessions()]
    found = heuristics.detect(_of(traces, [*planted, *clean]), POLICY)
    got = {}
    for f in found:
        got.setdefault(f.trace_id, []).append((f.error_class, f.affected_step))
    assert {t: got.get(t) for t in planted} == {t: [(c, step)] for t, (_, c, step) in planted.items()}
    assert {t: got[t] for t in clean if t in got} == {}


def test_findings_name_detector_version_and_the_causing_step(traces):
    planted = planted_sessions()
    found = {f.trace_id: f for f in heuristics.detect(_of(traces, planted), POLICY)}
    upstream = found["upstream-en"]
    assert (upstream.detector, upstream.detector_version, upstream.cause_step) == ("upstream_data_missing", "1", 2)
    assert "step 2 (lookup_order) returned []" in upstream.evidence
    assert found["tool-error-ignored"].cause_step == 4 and "HTTP 502" in found["tool-error-ignored"].evidence
    assert found["policy-refusal"].is_error is False and found["unexpected-refusal"].is_error is True
    assert set(heuristics.versions()) >= {"loop", "truncated", "refusal", "route_cost_outlier"}


def test_unknown_models_are_reported_not_guessed(traces):
    assert heuristics.unknown_models(_of(traces, ["clean-unknown-model", "clean0"])) == ["acme-llm-7"]


def test_a_session_far_above_its_route_is_a_cost_outlier():
    def trace(i: int, cost: float) -> Trace:
        step = Step(f"r{i}", None, f"k{i}", f"s{i}", None, "llm.call", None, 0, "x", service="support.answer")
        step.cost_usd = cost
        return Trace(f"r{i}", None, [step])

    traces = [trace(i, 0.01 + i * 0.0001) for i in range(25)] + [trace(99, 0.2)]
    found = heuristics.detect(traces, POLICY)
    assert [(f.trace_id, f.error_class, f.detector) for f in found] == [("r99", "cost_anomaly", "route_cost_outlier")]


def test_violating_fixtures_carry_no_planted_heuristic_class(traces):
    # the validator's fixtures are about history shape; their content is clean
    found = heuristics.detect(_of(traces, violating_sessions()), POLICY)
    assert [(f.trace_id, f.error_class) for f in found if f.error_class != "loop"] == []
