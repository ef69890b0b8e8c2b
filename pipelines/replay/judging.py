"""The pairwise judge as diff replay's comparison.

For every diff replay whose two outputs are not identical, the judge of the
semantic-errors stage (``pipelines.judge.pairwise``) is asked which is better,
in both orders, the listed order drawn per call; ``decided_by`` then reads
``pairwise_judge:<both_orders|one_order|position_bias|unreadable|no_results>``.
Identical outputs (``exact_match``) and replays without an answer (``error``)
keep their deterministic verdict: nothing a judge could add. A candidate with
``comparison: signals`` is compared by the deterministic signals alone.

Judge requests go through the same LLM resource (purpose ``judge``, the
candidate named), so they are content-addressed too: a re-run asks nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.judge.pairwise import pairwise_requests, pairwise_verdict
from pipelines.llm.request import LLMRequest, LLMResult
from pipelines.replay.bodies import Answer

DECIDED_BY = "pairwise_judge"
# deterministic verdicts a judge is not asked to overrule
SETTLED = ("exact_match", "error")
Ask = Callable[[list[LLMRequest]], Mapping[str, LLMResult]]


@dataclass(frozen=True)
class Judged:
    verdict: str
    decided_by: str
    cost_usd: float
    simulated: bool


Judge = Callable[[Sequence[tuple[Mapping[str, Any], Answer, Answer]]], list[Judged]]


def output_of(answer: Answer) -> dict[str, Any]:
    return {"text": answer.text or "", "finish_reason": answer.finish_reason}


def pairwise_judge(ask: Ask, *, model: str, candidate: str, max_tokens: int = 300) -> Judge:
    """A judge for ``DayInputs.judge``: (call, old, new) triples -> one ``Judged`` each, asked in one round."""

    def judge(items: Sequence[tuple[Mapping[str, Any], Answer, Answer]]) -> list[Judged]:
        asked = [
            pairwise_requests(
                call, output_of(old), output_of(new), model=model, max_tokens=max_tokens, candidate=candidate
            )
            for call, old, new in items
        ]
        results = ask([r for pair in asked for r in pair]) if asked else {}
        out = []
        charged: set[str] = set()  # two identical comparisons share their requests: billed once
        for pair in asked:
            got = [results[r.key] for r in pair if r.key in results]
            verdict = pairwise_verdict(got, pair)
            cost = sum(r.cost_usd or 0.0 for r in got if r.key not in charged)
            charged.update(r.key for r in got)
            out.append(Judged(verdict.verdict, f"{DECIDED_BY}:{verdict.decided_by}", round(cost, 8), verdict.simulated))
        return out

    return judge
