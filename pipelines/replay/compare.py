"""Is a new answer better, worse or the same as the old one? Deterministic signals,
in order, each saying ``decided_by``:

1. ``error``: either side has no answer -> inconclusive;
2. ``exact_match``: same text, finish reason and tool calls -> same;
3. ``finish_reason``: one side truncated (``length``) or refused and the other not;
4. ``tool_calls``: different tools called -> inconclusive (a judge can tell which is right);
5. ``language``: one side answers in the customer's language (the call's
   ``segment['language']``) and the other does not;
6. ``length``: otherwise same when the lengths are within a factor of two, else inconclusive.

A diff replay is decided by the pairwise judge instead (``pipelines/replay/judging.py``)
unless the outputs are identical or one is missing; ``decided_by`` then reads
``pairwise_judge:...``. The signals still decide capture, pinned and state replays,
and every diff replay of a candidate with ``comparison: signals``.
"""

from __future__ import annotations

from pipelines.replay.bodies import Answer
from pipelines.replay.language import matches

IMPROVED, REGRESSED, SAME, INCONCLUSIVE = "improved", "regressed", "same", "inconclusive"
VERDICTS = (IMPROVED, REGRESSED, SAME, INCONCLUSIVE)
BAD_FINISH = ("length", "content_filter", "error")
LENGTH_FACTOR = 2.0


def compare(old: Answer, new: Answer, language: str | None) -> tuple[str, str]:
    """(verdict, decided_by) for ``new`` against ``old``."""
    if not old.ok or not new.ok:
        return INCONCLUSIVE, "error"
    if old.text == new.text and old.finish_reason == new.finish_reason and old.tool_calls == new.tool_calls:
        return SAME, "exact_match"
    old_bad, new_bad = old.finish_reason in BAD_FINISH, new.finish_reason in BAD_FINISH
    if old_bad != new_bad:
        return (REGRESSED if new_bad else IMPROVED), "finish_reason"
    if [name for name, _ in old.tool_calls] != [name for name, _ in new.tool_calls]:
        return INCONCLUSIVE, "tool_calls"
    old_ok, new_ok = matches(old.text, language), matches(new.text, language)
    if old_ok is not None and new_ok is not None and old_ok != new_ok:
        return (IMPROVED if new_ok else REGRESSED), "language"
    old_len, new_len = len(old.text or ""), len(new.text or "")
    if max(old_len, new_len) <= LENGTH_FACTOR * max(1, min(old_len, new_len)):
        return SAME, "length"
    return INCONCLUSIVE, "length"


def divergence(original: Answer, replayed: Answer) -> list[str]:
    """What a capture replay changed against the recorded call: output_text,
    finish_reason, tool_calls, response_model."""
    if not replayed.ok:
        return []
    named = [
        ("output_text", original.text != replayed.text),
        ("finish_reason", original.finish_reason != replayed.finish_reason),
        ("tool_calls", original.tool_calls != replayed.tool_calls),
        ("response_model", original.model != replayed.model),
    ]
    return [name for name, moved in named if moved]


def reproduces(original: Answer, sample: Answer, language: str | None) -> bool | None:
    """Does a sample show the original call's failure class again: same finish
    reason, same tools called, and the same answer-language verdict?"""
    if not sample.ok or original.finish_reason is None:
        return None
    same_tools = [n for n, _ in original.tool_calls] == [n for n, _ in sample.tool_calls]
    return (
        original.finish_reason == sample.finish_reason
        and same_tools
        and matches(original.text, language) == matches(sample.text, language)
    )
