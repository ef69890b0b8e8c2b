"""Sending request bodies N times each through the LLM resource and
collecting the answers per body: what `ablate` and `replay` share."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pipelines.llm.request import LLMRequest
from pipelines.record.canonical import request_sha256
from pipelines.replay.bodies import Answer, answer_of


class RunsRequests(Protocol):
    """The LLM resource's `run` (CONTRACTS.md section 1)."""

    def run(self, requests: Sequence[LLMRequest], warehouse: Any, **kwargs: Any) -> Iterable[Any]: ...


@dataclass(frozen=True)
class Sent:
    answers: dict[str, list[Answer]]  # by request_sha256, one per sample
    sent: int  # requests actually sent (the rest were found stored)
    reused: int
    cost_usd: float
    simulated: bool


def sample_requests(
    bodies: Iterable[dict[str, Any]],
    samples: int,
    *,
    purpose: str,
    mode: str,
    call_id: str | None,
    substituted: Mapping[str, str] | None = None,
    seal: Callable[[Any], Any] | None = None,
    cache_prefix: bool = True,
) -> list[LLMRequest]:
    """``samples`` requests per distinct body (sample_index 0..N-1): content-addressed, so a re-run sends nothing.
    ``substituted``: the retired model each body's call was recorded on, by the body's request hash;
    ``seal``: the bodies were decrypted (``LLMRequest.seal``)."""
    seen: dict[str, dict[str, Any]] = {}
    for body in bodies:
        seen.setdefault(request_sha256(body), body)
    return [
        LLMRequest(
            body=body,
            purpose=purpose,
            mode=mode,
            sample_index=i,
            call_id=call_id,
            substituted_from=(substituted or {}).get(sha),
            seal=seal,
            cache_prefix=cache_prefix,
        )
        for sha, body in seen.items()
        for i in range(samples)
    ]


def send(
    llm: RunsRequests,
    warehouse: Any,
    requests: Sequence[LLMRequest],
    *,
    run_id: str,
    batch: bool = False,
    budget_usd: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Sent:
    by_key = {r.key: r for r in requests}
    answers: dict[str, list[tuple[int, Answer]]] = defaultdict(list)
    sent = reused = 0
    cost = 0.0
    simulated = False
    for result in llm.run(requests, warehouse, run_id=run_id, batch=batch, budget_usd=budget_usd, progress=progress):
        request = by_key[result.key]
        answers[request.request_sha256].append((request.sample_index, answer_of(result)))
        reused += bool(result.reused)
        sent += not result.reused
        cost += 0.0 if result.reused else (result.cost_usd or 0.0)
        simulated |= bool(result.simulated)
    ordered = {sha: [a for _, a in sorted(items, key=lambda x: x[0])] for sha, items in answers.items()}
    return Sent(ordered, sent, reused, cost, simulated)
