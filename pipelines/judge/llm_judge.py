"""The LLM judge: requests for the sampled traces, sent through the LLM resource, read back into findings.

Every request is content-addressed by the resource (request hash, mode, sample),
so a re-run of a day sends nothing and finds every verdict stored. An answer
that does not parse is asked again once (another sample index, so another
request); if that fails too the trace gets a ``judge_error`` finding, never a
silent "no error". A share of the items is judged twice (sample 0 and 1) for
the self-agreement check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipelines.judge.findings import Finding, finding
from pipelines.judge.policy import Policy
from pipelines.judge.prompts import PROMPTS, JudgePrompt, request_body
from pipelines.judge.sampling import Selection, unit_hash
from pipelines.judge.timeline import Trace
from pipelines.judge.verdicts import Unreadable, parse_verdict
from pipelines.llm.request import BudgetExceeded, LLMRequest

RETRY_OFFSET = 100  # sample index of the retry of an unreadable answer
JUDGE_ERROR = "judge_error"
NO_ERROR = "no_error"


class LLMRunner(Protocol):
    def available(self) -> bool: ...

    def run(self, requests: Sequence[Any], warehouse: Any, **kwargs: Any) -> Iterable[Any]: ...


@dataclass(frozen=True)
class Item:
    trace: Trace
    prompt: JudgePrompt
    sample_index: int


@dataclass(frozen=True)
class Judgement:
    trace_id: str
    error_class: str  # the class the prompt asks about
    prompt_sha256: str
    prompt_version: str
    sample_index: int
    label: str  # the class answered, no_error, or judge_error
    confidence: float
    simulated: bool


@dataclass
class JudgeRun:
    skipped: str | None = None
    findings: list[Finding] = field(default_factory=list)
    judgements: list[Judgement] = field(default_factory=list)
    sent: int = 0
    reused: int = 0
    cost_usd: float = 0.0
    simulated: bool = False
    statuses: dict[str, int] = field(default_factory=dict)


def _request(item: Item, policy: Policy) -> LLMRequest:
    body = request_body(item.prompt, item.trace, policy.judge.model, policy.judge.max_tokens)
    first = item.trace.calls[-1].call_id if item.trace.calls else None
    return LLMRequest(body=body, purpose="judge", mode=item.prompt.mode, sample_index=item.sample_index, call_id=first)


def items_for(traces: Sequence[Trace], selections: dict[str, Selection], policy: Policy) -> list[Item]:
    items = []
    for trace in traces:
        if not selections[trace.trace_id].judged or not trace.calls:
            continue
        twice = unit_hash("self|" + trace.trace_id) < policy.judge.self_agreement_share
        for name in policy.judge.classes:
            prompt = PROMPTS[name]
            items.append(Item(trace, prompt, 0))
            if twice:
                items.append(Item(trace, prompt, 1))
    return items


def judge(
    traces: Sequence[Trace],
    selections: dict[str, Selection],
    policy: Policy,
    llm: LLMRunner | None,
    warehouse: Any,
    run_id: str,
    progress: Callable[[int, int], None] | None = None,
) -> JudgeRun:
    if llm is None or not llm.available():
        return JudgeRun(skipped="skipped: no LLM configured (TRACELAKE_LLM=off); heuristics and validator ran")
    out = JudgeRun()
    pending = items_for(traces, selections, policy)
    for attempt in (0, 1):
        if not pending:
            break
        try:
            unreadable = _send(pending, policy, llm, warehouse, run_id, out, progress, final=attempt == 1)
        except BudgetExceeded as e:
            # nothing was sent: the heuristics and the validator still land, and the run says why
            out.skipped = f"skipped: {e}"
            return out
        pending = [Item(i.trace, i.prompt, i.sample_index + RETRY_OFFSET) for i in unreadable]
    return out


def _send(items, policy, llm, warehouse, run_id, out: JudgeRun, progress, *, final: bool) -> list[Item]:
    requests = {}
    for item in items:
        request = _request(item, policy)
        requests[request.key] = (item, request)
    results = llm.run(
        [r for _, r in requests.values()],
        warehouse,
        run_id=run_id,
        batch=True,
        budget_usd=policy.judge.budget_usd,
        progress=progress,
    )
    unreadable = []
    for result in results:
        item, _ = requests[result.key]
        out.statuses[result.status] = out.statuses.get(result.status, 0) + 1
        out.reused += int(result.reused)
        out.sent += int(not result.reused)
        out.cost_usd += 0.0 if result.reused else float(result.cost_usd or 0.0)
        out.simulated |= bool(result.simulated)
        try:
            if result.status != "succeeded":
                raise Unreadable(f"request {result.status}: {result.error or 'no detail'}")
            verdict = parse_verdict(result.response, [item.prompt.error_class, NO_ERROR])
        except Unreadable as e:
            if not final:
                unreadable.append(item)
                continue
            _record(out, item, result, JUDGE_ERROR, 0.0, f"judge answer unreadable after a retry: {e}", None)
            continue
        _record(out, item, result, verdict.error_class, verdict.confidence, verdict.evidence, verdict.affected_step)
    return unreadable


def _record(out: JudgeRun, item: Item, result, label: str, confidence: float, evidence: str, step: int | None) -> None:
    prompt = item.prompt
    base = item.sample_index % RETRY_OFFSET
    out.judgements.append(
        Judgement(
            item.trace.trace_id,
            prompt.error_class,
            prompt.sha256,
            prompt.version,
            base,
            label,
            confidence,
            bool(result.simulated),
        )
    )
    if label == NO_ERROR or base != 0:
        return  # the second sample only measures agreement; findings come from the first
    # the judge may only name a step it was shown; otherwise the final answer it judged
    shown = {s.step_index: s for s in item.trace.steps if s.event_type in ("llm.call", "tool.invoke")}
    answers = [s for s in item.trace.calls if (s.text or "").strip()] or item.trace.calls
    target = shown.get(step) if step is not None else None
    if target is None:
        target = answers[-1]
    detector = f"llm_judge:{prompt.error_class}"
    out.findings.append(
        finding(
            item.trace,
            target,
            label,
            detector,
            prompt.version,
            ("[simulated] " if result.simulated else "") + evidence,
            confidence=confidence,
            request_key=result.key,
            simulated=bool(result.simulated),
            prompt_sha256=prompt.sha256,
        )
    )
