"""What made a bad call bad, as a test a replayed answer can pass or fail.

The symptom is read from the call's own record, most specific first:
``errored`` (the call failed), ``truncated`` (stopped at max tokens),
``language_mismatch`` (answered in another language than the customer's
segment language), else ``reproduces`` (the replay core's test: same finish
reason, same tools, same answer-language verdict as the bad output).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pipelines.replay.bodies import Answer, recorded_answer
from pipelines.replay.compare import reproduces
from pipelines.replay.language import matches

TRUNCATED = ("length", "max_tokens")


def customer_language(call: Mapping[str, Any]) -> str | None:
    segment = call.get("segment") or {}
    if isinstance(segment, list):  # a Delta map read as a list of {key, value}
        segment = {item["key"]: item["value"] for item in segment}
    return segment.get("language")


def symptom_of(call: Mapping[str, Any]) -> str:
    if call.get("status") == "error" or call.get("error_type"):
        return "errored"
    if call.get("finish_reason") in TRUNCATED:
        return "truncated"
    if matches(call.get("output_text"), customer_language(call)) is False:
        return "language_mismatch"
    return "reproduces"


def failure_test(call: Mapping[str, Any], symptom: str) -> Callable[[Answer], bool]:
    """A predicate: does a replayed answer show ``symptom`` again?"""
    language = customer_language(call)
    original = recorded_answer(call)
    if symptom == "errored":
        return lambda a: a.status != "succeeded"
    if symptom == "truncated":
        return lambda a: a.finish_reason in TRUNCATED
    if symptom == "language_mismatch":
        return lambda a: a.ok and matches(a.text, language) is False
    return lambda a: bool(reproduces(original, a, language))
