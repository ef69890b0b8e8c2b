"""The state validator: each violating fixture gets its code at its step, marked first; clean ones none."""

from __future__ import annotations

from datetime import date

from pipelines.judge import state
from tests.judge.sessions import clean_sessions, planted_sessions, violating_sessions


def test_each_violation_code_is_found_and_marked_first(traces):
    expected = violating_sessions()
    rows = state.violation_rows([traces[t] for t in expected], {t: date(2026, 11, 20) for t in expected})
    first = {r["trace_id"]: (r["code"], r["step_index"]) for r in rows if r["first_in_trace"]}
    assert first == {t: (code, step) for t, (_, code, step) in expected.items()}
    assert sum(r["first_in_trace"] for r in rows) == len(expected)
    assert {r["code"] for r in rows} == set(state.CODES)


def test_well_formed_histories_have_no_violation(traces):
    ids = [s.trace_id for s in clean_sessions()] + list(planted_sessions())
    assert {t: state.validate(traces[t]) for t in ids if state.validate(traces[t])} == {}
