"""The investigation's decisions without a warehouse or a model: which trace and call a ticket is
about, when a difference counts as the cause, and what the conclusion says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipelines.debug import investigation as inv
from pipelines.debug.ablation import Outcome, Variant, wilson
from pipelines.debug.siblings import Difference

AT = datetime(2026, 11, 29, 14, 32, tzinfo=UTC)


def _trace(trace_id: str, minutes: int, **signals) -> dict:
    return {"trace_id": trace_id, "started_at": AT + timedelta(minutes=minutes), **signals}


def test_negative_feedback_beats_an_error_beats_a_finding_then_the_nearest():
    traces = [
        _trace("near", 0),
        _trace("finding", 1, findings=2),
        _trace("error", 2, error_count=1),
        _trace("down-far", 3, negative_feedback=True),
        _trace("down-near", -1, negative_feedback=True),
    ]
    best, why = inv.pick_trace(traces, AT)
    assert best["trace_id"] == "down-near"
    assert "negative feedback" in why and "2 of 5 traces have it" in why
    best, _ = inv.pick_trace(traces[:3], AT)
    assert best["trace_id"] == "error"
    best, why = inv.pick_trace([_trace("a", 3), _trace("b", -1)], AT)
    assert best["trace_id"] == "b" and why.startswith("none of the 2 traces")


def test_the_call_with_the_feedback_then_the_error_then_the_finding():
    calls = [
        {"call_id": "c1", "occurred_at": AT, "status": "ok"},
        {"call_id": "c2", "occurred_at": AT + timedelta(seconds=1), "status": "error", "error_type": "overloaded"},
        {"call_id": "c3", "occurred_at": AT + timedelta(seconds=2), "status": "ok", "negative_feedback": True},
    ]
    assert inv.pick_call({"calls": calls})[0]["call_id"] == "c3"
    call, why = inv.pick_call({"calls": calls[:2]})
    assert call["call_id"] == "c2" and "overloaded" in why
    spans = [{"step_index": 4, "call_id": "c1"}]
    record = {
        "calls": [calls[0], {**calls[2], "negative_feedback": False}],
        "spans": spans,
        "violations": [{"step_index": 4}],
    }
    assert inv.pick_call(record) == (calls[0], "a judge finding names its step")


def _outcome(side: str, index: int, failures: int, samples: int = 10) -> Outcome:
    low, high = wilson(failures, samples)
    return Outcome(Variant(side, index, f"d{index}", "b", "x", {}), samples, failures, low, high, 0.0, True)


DOC = Difference(1, "document", "2", "system", {"doc_id": "kb-stale"}, {"doc_id": "kb-fresh"})
MESSAGE = Difference(2, "message", "0", "messages", "a", "b")


def _isolation(doc: tuple[int, int], message: tuple[int, int], good0: int = 5) -> inv.Isolation:
    results = [_outcome("bad", 0, 10), _outcome("good", 0, good0)]
    for d, (reversed_, introduced) in ((DOC, doc), (MESSAGE, message)):
        results += [_outcome("bad", d.number, reversed_), _outcome("good", d.number, introduced)]
    return inv.isolate(results, [DOC, MESSAGE])


def _reproduction(failures: int, samples: int = 10) -> inv.Reproduction:
    return inv.Reproduction("language_mismatch", [], inv.Rate.of(failures, samples), "", None, "")


def test_a_large_effect_is_named_with_its_rates():
    isolation = _isolation(doc=(2, 10), message=(10, 5))
    assert isolation.cause is not None and isolation.cause.difference is DOC
    text = inv.conclude(_reproduction(10), isolation, sibling="good", likely=[])
    assert text.startswith("reproduces 10/10 [0.72–1.00]; the retrieved block `kb-stale` causes it")
    assert "10/10 → 2/10 when replaced; 5/10 → 10/10 when introduced into the good sibling" in text


def test_a_small_effect_is_not_called_a_cause():
    isolation = _isolation(doc=(9, 6), message=(10, 5))
    assert isolation.cause is None
    text = inv.conclude(_reproduction(10), isolation, sibling="good", likely=[])
    assert "no single difference from the best sibling is significant" in text and "causes it" not in text


def test_a_good_sibling_that_fails_as_often_isolates_nothing():
    text = inv.conclude(_reproduction(10), _isolation(doc=(10, 10), message=(10, 10), good0=10), sibling="g", likely=[])
    assert "the known-good sibling shows the symptom" in text and "10/10 as recorded" in text


def test_no_reproduction_names_the_likely_reasons():
    call = {"call_id": "c", "status": "ok"}
    rot = {
        "status": "rotted",
        "components": ["template_changed"],
        "detail": ["system: template t v2 renders differently"],
    }
    likely = inv.likely_reasons(call, rot=rot, fidelity_reasons=["template_changed"], substituted=None, dropped={})
    text = inv.conclude(_reproduction(0, 8), None, sibling=None, likely=likely, approximate=["template_changed"])
    assert text.startswith("does not reproduce (0/8 [0.00–0.32]): likely a rotted pointer: system: template t v2")
    assert text.endswith("(the replay was approximate: template_changed)")


@pytest.mark.parametrize(
    ("asked", "dropped", "says"),
    [
        ({"temperature": 0.3}, {}, "temperature 0.3 sent"),
        ({"temperature": 0}, {"temperature": "refused"}, "temperature 0 asked but not sent (API version v refuses it"),
        ({}, {}, "no sampling parameters recorded"),
    ],
)
def test_the_sampling_note_says_what_went_on_the_wire(asked, dropped, says):
    assert says in inv.sampling_note(asked, dropped, "v")
