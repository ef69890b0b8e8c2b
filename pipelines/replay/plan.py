"""A replay plan: what a candidate's replay of a window will send and cost, before any spend.

For a candidate and its days: requests by model, the models that are retired
(and what each is replayed on) or unknown (priced at the most expensive row),
the parameters the API version refuses (removed, and why), the requests the
ledger already answers, the batches needed under the API's limits, and the
cost: an upper bound without cache reads, the expectation with them, and a
bound of what the rounds after the first can add (the pairwise judge of diff
replays, the later steps of state replays), against the run's budget.

A plan is ``blocked`` when the run would exceed the budget, would send on a
retired model nobody mapped, or has requests to send and no LLM backend; each
reason says what to set. ``tracelake replay --plan`` prints it; a replay run
logs it and records it as metadata before sending anything, and stops there
when it is blocked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any

from pipelines.judge.pairwise import pairwise_requests
from pipelines.llm.batch_split import ENVELOPE_BYTES, MAX_BATCH_BYTES, MAX_BATCH_REQUESTS, item_bytes, split
from pipelines.llm.estimate import CHARS_PER_TOKEN, estimate, estimated_input_tokens, with_cache
from pipelines.llm.lifecycle import Lifecycle, UnmappedModel, serve
from pipelines.llm.params import Translator
from pipelines.llm.pricing import estimate_usd, is_priced, most_expensive
from pipelines.llm.request import LLMRequest, LLMResult
from pipelines.replay.bodies import answer_of, replay_request
from pipelines.replay.compare import compare
from pipelines.replay.day import DayInputs, Planned, Serve, SessionStart, outgoing, plan_day
from pipelines.replay.judging import SETTLED, output_of

# a state step's growth over the previous one, at most: the answer (max_tokens) and a tool result
TOOL_RESULT_TOKENS = 1_000
# what the ledger answers: (stored results by key, the requests left to send, why stored ones are sent again)
Answered = Callable[[list[LLMRequest]], tuple[dict[str, LLMResult], list[LLMRequest], Mapping[str, int]]]


@dataclass
class ReplayPlan:
    candidate: str
    api_version: str
    days: list[date] = field(default_factory=list)
    calls: int = 0  # calls the candidate applies to
    replays: int = 0  # replays planned (rows), sendable or not
    ineligible: int = 0
    requests: int = 0  # distinct requests of the first round (candidate sides and baselines)
    in_ledger: int = 0
    resent: Counter = field(default_factory=Counter)  # why answered requests are sent again
    to_send: int = 0
    by_model: Counter = field(default_factory=Counter)  # model sent -> requests to send
    substitutions: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    unmapped: dict[str, dict[str, Any]] = field(default_factory=dict)
    unknown: Counter = field(default_factory=Counter)  # model -> requests, priced at the most expensive row
    dropped: Counter = field(default_factory=Counter)  # (model, parameter, reason) -> requests
    batches: int = 0
    request_bytes: int = 0
    usd: float = 0.0  # first round, upper bound (no cache reads)
    usd_with_cache: float = 0.0  # first round, expected with cache reads
    cache_read_tokens: int = 0
    judge_requests: int = 0
    judge_usd: float = 0.0  # upper bound
    state_requests: int = 0
    state_usd: float = 0.0  # upper bound
    budget_usd: float | None = None
    spent_usd: float = 0.0  # what this run has spent already
    backend: str = "simulator"
    blocked: list[str] = field(default_factory=list)
    batch: bool = True  # sent as Message Batches (half price); False: one by one
    # a plan of given requests (one call's investigation) rather than of a candidate's days
    of_requests: bool = False

    @property
    def total_usd(self) -> float:
        """The most the whole run can cost: every round, no cache reads."""
        return round(self.usd + self.judge_usd + self.state_usd, 6)

    def decide(self) -> ReplayPlan:
        """Fill ``blocked`` with what stops the run before it sends anything."""
        self.blocked = []
        for model, found in sorted(self.unmapped.items()):
            self.blocked.append(
                f"{found['calls']} calls are recorded on {model}, retired on {found['retired_on']} "
                f"({found['source']}), which has no substitute: add '- {{model: {model}, substitute: <a served "
                "model>}' to the lifecycle file TRACELAKE_MODEL_LIFECYCLE names (or pipelines/llm/lifecycle.yaml)"
            )
        if self.budget_usd is not None and self.spent_usd + self.total_usd > self.budget_usd:
            before = f" on top of ${self.spent_usd:.4f} already spent by this run" if self.spent_usd else ""
            self.blocked.append(
                f"up to ${self.total_usd:.4f}{before} is over the budget of ${self.budget_usd:.4f}: set "
                f"TRACELAKE_LLM_BUDGET_USD to at least {self.spent_usd + self.total_usd:.2f}, or replay fewer calls "
                "(the candidate's sample.per_stratum, or a shorter window)"
            )
        needs_llm = self.to_send + self.judge_requests + self.state_requests
        if self.backend == "off" and needs_llm:
            self.blocked.append(
                f"{needs_llm} requests are not in the ledger and no LLM is configured: set ANTHROPIC_API_KEY "
                "(or TRACELAKE_LLM=simulator|api|bedrock|vertex)"
            )
        return self

    # -- how it reads -------------------------------------------------------------------------------

    def lines(self) -> list[str]:
        """The plan as plain lines (the run's log, the CLI)."""
        span = f"{self.days[0]}..{self.days[-1]}" if len(self.days) > 1 else str(self.days[0]) if self.days else ""
        if self.of_requests:
            out = [f"LLM plan for {self.candidate} (anthropic-version {self.api_version}, {self.backend})"]
        else:
            out = [
                f"replay plan for {self.candidate} {span} (anthropic-version {self.api_version}, {self.backend})",
                f"  {self.calls} calls apply, {self.replays} replays planned ({self.ineligible} ineligible: "
                "nothing sent)",
            ]
        out += [
            f"  {self.requests} requests{'' if self.of_requests else ' in the first round'}: {self.in_ledger} "
            "answered by the ledger, "
            f"{self.to_send} to send"
            + (f" ({', '.join(f'{n} {why}' for why, n in sorted(self.resent.items()))})" if self.resent else ""),
        ]
        for model, n in sorted(self.by_model.items()):
            note = "" if is_priced(model) else f" (not in the price table: priced as {most_expensive().family})"
            out.append(f"    {n} on {model}{note}")
        for (old, new), found in sorted(self.substitutions.items()):
            out.append(
                f"  retired: {old} (retired {found['retired_on']}, {found['source']}) -> replayed on {new}: "
                f"{found['requests']} requests, baselines re-run on {new} too"
            )
        for model, found in sorted(self.unmapped.items()):
            out.append(f"  retired without a substitute: {model} ({found['calls']} calls)")
        for model, n in sorted(self.unknown.items()):
            out.append(f"  unknown model: {model} ({n} requests), priced as {most_expensive().family}")
        for (model, param, reason), n in sorted(self.dropped.items()):
            out.append(f"  dropped: {param} from {n} requests on {model} ({reason})")
        if self.batch:
            out.append(
                f"  {self.batches} message batches ({self.request_bytes / 1e6:.1f} MB; limits "
                f"{MAX_BATCH_REQUESTS:,} requests / {MAX_BATCH_BYTES // 2**20} MB each)"
            )
        else:
            out.append(f"  sent one by one, not as a batch ({self.request_bytes / 1e6:.1f} MB; no batch discount)")
        out.append(
            f"  cost: up to ${self.usd:.4f} without cache reads, about ${self.usd_with_cache:.4f} with them "
            f"({self.cache_read_tokens:,} tokens read from cache)"
        )
        if self.judge_requests:
            out.append(f"  then up to {self.judge_requests} pairwise-judge requests: up to ${self.judge_usd:.4f}")
        if self.state_requests:
            out.append(f"  then up to {self.state_requests} later state steps: up to ${self.state_usd:.4f}")
        cap = "no cap" if self.budget_usd is None else f"budget ${self.budget_usd:.4f}"
        spent = f", ${self.spent_usd:.4f} spent by this run already" if self.spent_usd else ""
        out.append(f"  at most ${self.total_usd:.4f} in all; {cap}{spent}")
        out.extend(f"  STOP: {reason}" for reason in self.blocked)
        return out

    def markdown(self) -> str:
        """The plan as the UI shows it (asset metadata)."""
        head, *rest = self.lines()
        return f"**{head}**\n\n" + "\n".join(f"- {line.strip()}" for line in rest)

    def metadata(self) -> dict[str, Any]:
        """Plain values for run tags and asset metadata."""
        return {
            "plan_requests": self.requests,
            "plan_in_ledger": self.in_ledger,
            "plan_to_send": self.to_send,
            "plan_batches": self.batches,
            "plan_usd_upper": self.total_usd,
            "plan_usd_first_round": self.usd,
            "plan_usd_first_round_with_cache": self.usd_with_cache,
            "plan_usd_with_cache": round(self.usd_with_cache + self.judge_usd + self.state_usd, 6),
            "plan_budget_usd": self.budget_usd,
            "plan_substitutions": ", ".join(f"{a} -> {b}" for a, b in sorted(self.substitutions)) or "none",
            "plan_dropped": ", ".join(sorted({f"{p} ({r})" for _, p, r in self.dropped})) or "none",
            "plan_blocked": "; ".join(self.blocked) or "no",
        }


def recording_serve(lifecycle: Lifecycle | None, today: date | None, unmapped: Counter) -> Serve:
    """``serve`` that records a retired model without a substitute instead of raising."""

    def serve_body(body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        try:
            return serve(lifecycle, body, today)
        except UnmappedModel as e:
            unmapped[e.model] += 1
            return body, None

    return serve_body


def plan_replay(
    days: Sequence[DayInputs],
    *,
    answered: Answered,
    translator: Translator,
    lifecycle: Lifecycle | None,
    today: date | None = None,
    judge_model: str = "claude-haiku-4-5-20251001",
    judge_max_tokens: int = 300,
    budget_usd: float | None = None,
    spent_usd: float = 0.0,
    backend: str = "simulator",
    max_batch_requests: int = MAX_BATCH_REQUESTS,
    max_batch_bytes: int = MAX_BATCH_BYTES,
) -> ReplayPlan:
    """The plan of a candidate's replay of ``days`` (nothing is sent; see the module docstring)."""
    plan = ReplayPlan(
        days[0].candidate.id if days else "",
        translator.api_version,
        budget_usd=budget_usd,
        spent_usd=spent_usd,
        backend=backend,
    )
    unmapped: Counter = Counter()
    first: list[LLMRequest] = []
    judged: list[LLMRequest] = []
    bound_judge: list[LLMRequest] = []
    for inputs in days:
        inputs = replace(inputs, serve=recording_serve(lifecycle, today, unmapped))
        plans, starts = plan_day(inputs)
        plan.days.append(inputs.day)
        plan.calls += sum(1 for c in inputs.calls if inputs.candidate.applies(c))
        plan.replays += len(plans) + len(starts)
        plan.ineligible += sum(1 for p in plans if p.sent is None) + sum(1 for s in starts if s.body is None)
        day_first = outgoing(plans) + _state_first(inputs, starts)
        first += day_first
        stored, _, _ = answered(day_first)
        if inputs.candidate.comparison == "pairwise_judge":
            real, bound = _judge_requests(plans, stored, judge_model, judge_max_tokens, inputs.candidate.id)
            judged += real
            bound_judge += bound
        plan.state_requests += sum(1 for s in starts if s.body) * max(0, inputs.candidate.sample.step_limit - 1)
        plan.state_usd += _state_bound(starts, inputs.candidate.sample.step_limit)
    first = list({r.key: r for r in first}.values())
    stored, pending, resent = answered(first)
    plan.requests, plan.in_ledger, plan.to_send = len(first), len(stored), len(pending)
    plan.resent = Counter(resent)
    _describe(plan, pending, translator, lifecycle, today, max_batch_requests, max_batch_bytes)
    _unmapped(plan, unmapped, lifecycle, today)
    # the pairwise judge: requests from stored answers where both sides are answered, a bound for the rest
    _, judge_pending, _ = answered(list({r.key: r for r in judged}.values()))
    judge_pending += list({r.key: r for r in bound_judge}.values())
    plan.judge_requests = len(judge_pending)
    plan.judge_usd = estimate(judge_pending, batch=True).usd
    plan.state_usd = round(plan.state_usd, 6)
    return plan.decide()


def plan_requests(
    label: str,
    requests: Sequence[LLMRequest],
    *,
    answered: Answered,
    translator: Translator,
    lifecycle: Lifecycle | None,
    today: date | None = None,
    unmapped: Mapping[str, int] | None = None,
    budget_usd: float | None = None,
    spent_usd: float = 0.0,
    backend: str = "simulator",
    batch: bool = True,
    max_batch_requests: int = MAX_BATCH_REQUESTS,
    max_batch_bytes: int = MAX_BATCH_BYTES,
) -> ReplayPlan:
    """The plan of requests built elsewhere (one call's investigation: its replays and ablation
    variants, already on served models): the same accounting and stops as a candidate's replay.
    ``unmapped``: retired models without a substitute met while building them, with counts."""
    plan = ReplayPlan(
        label,
        translator.api_version,
        budget_usd=budget_usd,
        spent_usd=spent_usd,
        backend=backend,
        batch=batch,
        of_requests=True,
    )
    todo = list({r.key: r for r in requests}.values())
    stored, pending, resent = answered(todo)
    plan.requests, plan.in_ledger, plan.to_send = len(todo), len(stored), len(pending)
    plan.resent = Counter(resent)
    _describe(plan, pending, translator, lifecycle, today, max_batch_requests, max_batch_bytes)
    _unmapped(plan, Counter(unmapped or {}), lifecycle, today)
    return plan.decide()


def _unmapped(plan: ReplayPlan, unmapped: Counter, lifecycle: Lifecycle | None, today: date | None) -> None:
    for model, calls in unmapped.items():
        status = lifecycle.status(model, today) if lifecycle else None
        plan.unmapped[model] = {
            "calls": calls,
            "retired_on": status and status.retired_on,
            "source": status and status.source,
        }


def _describe(
    plan: ReplayPlan,
    pending: Sequence[LLMRequest],
    translator: Translator,
    lifecycle: Lifecycle | None,
    today: date | None,
    max_batch_requests: int,
    max_batch_bytes: int,
) -> None:
    """Models, substitutions, dropped parameters, batches and cost of the requests to send."""
    sizes = []
    for request in pending:
        model = str(request.model or "")
        plan.by_model[model] += 1
        if request.substituted_from:
            key = (request.substituted_from, model)
            if key not in plan.substitutions:
                status = lifecycle.status(request.substituted_from, today) if lifecycle else None
                plan.substitutions[key] = {
                    "requests": 0,
                    "retired_on": status and status.retired_on,
                    "source": status and status.source,
                }
            plan.substitutions[key]["requests"] += 1
        if not is_priced(model):
            plan.unknown[model] += 1
        wire, dropped = translator.wire(request.body, cache_prefix=request.cache_prefix)
        for param, reason in dropped.items():
            plan.dropped[(model, param, reason)] += 1
        sizes.append(item_bytes(request.key, wire))
    if plan.batch:
        plan.batches = sum(1 for _ in split(sizes, max_requests=max_batch_requests, max_bytes=max_batch_bytes))
    plan.request_bytes = sum(sizes) + ENVELOPE_BYTES * plan.batches
    plan.usd = estimate(pending, batch=plan.batch).usd
    cached = with_cache(pending, batch=plan.batch)
    plan.usd_with_cache, plan.cache_read_tokens = cached.usd, cached.cache_read_tokens


def _state_first(inputs: DayInputs, starts: Sequence[SessionStart]) -> list[LLMRequest]:
    return [
        replay_request(s.body, "state", 0, inputs.candidate.id, s.sampled.call["call_id"], s.substituted_from)
        for s in starts
        if s.body is not None
    ]


def _state_bound(starts: Iterable[SessionStart], step_limit: int) -> float:
    """The most the steps after the first can cost: each grows by an answer and a tool result."""
    usd = 0.0
    for start in starts:
        if start.body is None:
            continue
        first = estimated_input_tokens(start.body)
        out = int(start.body.get("max_tokens") or 0)
        model = start.body.get("model")
        for step in range(1, step_limit):
            usd += estimate_usd(model, first + step * (out + TOOL_RESULT_TOKENS), out, batch=True)
    return usd


def _judge_requests(
    plans: Sequence[Planned], stored: Mapping[str, LLMResult], model: str, max_tokens: int, candidate: str
) -> tuple[list[LLMRequest], list[LLMRequest]]:
    """(the judge requests of diff replays both of whose sides the ledger answers, a bound for the others:
    two requests per replay, each side as long as its max_tokens allows)."""
    real: list[LLMRequest] = []
    bound: list[LLMRequest] = []
    for p in plans:
        if p.mode != "diff" or p.sent is None or p.baseline is None:
            continue
        call = p.sampled.call
        if p.sent.key in stored and p.baseline.key in stored:
            old, new = answer_of(stored[p.baseline.key]), answer_of(stored[p.sent.key])
            if compare(old, new, p.sampled.segment.get("language"))[1] in SETTLED:
                continue
            real += pairwise_requests(
                call, output_of(old), output_of(new), model=model, max_tokens=max_tokens, candidate=candidate
            )
            continue
        longest = {
            "text": "x" * int(CHARS_PER_TOKEN * int(p.sent.body.get("max_tokens") or 0) + 1),
            "finish_reason": "end_turn",
        }
        bound += pairwise_requests(
            call,
            longest,
            {**longest, "text": longest["text"] + "y"},
            model=model,
            max_tokens=max_tokens,
            candidate=candidate,
        )
    return real, bound
