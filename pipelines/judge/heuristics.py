"""Heuristic detectors: pure functions over one trace, each with its own name and version.

Each returns findings that name the step where the error shows (``affected_step``)
and, where another step caused it, that step too (``cause_step``). A detector's
version changes whenever its rule or wording changes, so findings stay comparable.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.judge import wording
from pipelines.judge.findings import Finding, finding, quote
from pipelines.judge.model_info import ModelInfo, load_model_info
from pipelines.judge.policy import Policy
from pipelines.judge.timeline import Step, Trace
from pipelines.record.canonical import canonical_json

EMPTY_TEXT = ("", "null", "none", "[]", "{}", '""')


@dataclass(frozen=True)
class Detector:
    name: str
    version: str
    run: Callable[[Trace, Policy, ModelInfo], list[Finding]]


def is_empty(result: Any) -> bool:
    """A tool result that carries no data: null, [], {}, an empty string (or one of those as text,
    or a list of content blocks whose text is one of those)."""
    if result is None:
        return True
    if isinstance(result, str):
        return result.strip().lower() in EMPTY_TEXT
    if isinstance(result, (list, dict)) and not result:
        return True
    if isinstance(result, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in result):
        return all(is_empty(b.get("text")) for b in result)
    return False


def _next_turn(trace: Trace, after: Step) -> Step | None:
    """The first model turn after ``after`` that says something (skips pure tool-use turns)."""
    for step in trace.steps:
        if step.step_index > after.step_index and step.event_type == "llm.call" and (step.text or "").strip():
            return step
    return None


def _tool_then_turn(trace: Trace, tool_matches, turn_says, error_class: str, confidence: float, what) -> list[Finding]:
    """A tool step that matches, then the next model turn saying what it should not."""
    out = []
    for tool in trace.steps:
        if tool.event_type != "tool.invoke" or not tool_matches(tool):
            continue
        turn = _next_turn(trace, tool)
        if turn is not None and turn_says(turn.text):
            said = f'step {turn.step_index}: "{quote(turn.text)}"'
            evidence = f"step {tool.step_index} ({tool.tool_called}) {what(tool)}; {said}"
            out.append(finding(trace, turn, error_class, error_class, "1", evidence, confidence=confidence, cause=tool))
    return out


def upstream_data_missing(trace: Trace, policy: Policy, _: ModelInfo) -> list[Finding]:
    return _tool_then_turn(
        trace,
        lambda tool: tool.tool_success is not False and is_empty(tool.tool_result),
        wording.states_data,
        "upstream_data_missing",
        0.8,
        lambda tool: f"returned {quote(canonical_json(tool.tool_result), 20)}, the next turn states data",
    )


def tool_error_ignored(trace: Trace, policy: Policy, _: ModelInfo) -> list[Finding]:
    return _tool_then_turn(
        trace,
        lambda tool: tool.tool_success is False,
        wording.reports_success,
        "tool_error_ignored",
        0.85,
        lambda tool: (
            "failed: "
            + quote(tool.tool_error or (f"HTTP {tool.http_status}" if tool.http_status else "error"), 60)
            + ", the next turn reports success"
        ),
    )


def loop(trace: Trace, policy: Policy, _: ModelInfo) -> list[Finding]:
    limit, repeats = policy.thresholds.loop_max_step, policy.thresholds.loop_repeats
    seen: Counter[tuple[str, str]] = Counter()
    for step in trace.steps:
        if step.event_type == "session.end":
            break  # what is logged after the end (a late write) is the state validator's concern
        if step.event_type == "tool.invoke":
            key = (step.tool_called or "", canonical_json(step.tool_arguments))
            seen[key] += 1
            if seen[key] == repeats:
                return [
                    finding(
                        trace,
                        step,
                        "loop",
                        "loop",
                        "1",
                        f"step {step.step_index}: {step.tool_called} called {repeats} times with identical arguments",
                        confidence=0.9,
                    )
                ]
        if step.step_index > limit:
            return [
                finding(
                    trace, step, "loop", "loop", "1", f"step {step.step_index} is past step {limit}", confidence=0.7
                )
            ]
    return []


def session_cost(trace: Trace, policy: Policy, _: ModelInfo) -> list[Finding]:
    threshold = policy.thresholds.session_cost_usd
    total = 0.0
    for step in trace.calls:
        total += step.cost_usd or 0.0
        if total > threshold:
            return [
                finding(
                    trace,
                    step,
                    "cost_anomaly",
                    "session_cost",
                    "1",
                    f"session cost reached {total:.4f} USD at step {step.step_index} (threshold {threshold:.2f})",
                    cost_usd=trace.cost_usd,
                )
            ]
    return []


def context_overflow(trace: Trace, policy: Policy, models: ModelInfo) -> list[Finding]:
    out = []
    for step in trace.calls:
        window = models.context_window(step.model)
        if window is None or step.tokens_in is None:
            continue  # unknown models are reported by unknown_models(), never guessed
        if step.tokens_in >= policy.thresholds.context_fraction * window:
            out.append(
                finding(
                    trace,
                    step,
                    "context_overflow",
                    "context_overflow",
                    "1",
                    f"step {step.step_index}: {step.tokens_in} input tokens of {step.model}'s {window} "
                    f"(model-info {models.version})",
                    confidence=1.0,
                )
            )
    return out


def _user_text(step: Step) -> str:
    for message in reversed(step.messages):
        if message.get("role") == "user":
            texts = [p.get("text") or "" for p in message.get("parts") or [] if p.get("type") == "text"]
            if any(texts):
                return " ".join(texts)
    return ""


def refusal(trace: Trace, policy: Policy, _: ModelInfo) -> list[Finding]:
    topics = [re.compile(t) for t in policy.refusal_topics]
    out = []
    for step in trace.calls:
        filtered = step.finish_reason == "content_filter"
        if not (filtered or wording.refuses(step.text)):
            continue
        asked = _user_text(step)
        expected = filtered or any(t.search(asked) for t in topics)
        out.append(
            finding(
                trace,
                step,
                "policy_refusal" if expected else "unexpected_refusal",
                "refusal",
                "1",
                f"step {step.step_index} refuses"
                + (" (provider safety stop)" if filtered else "")
                + f': "{quote(step.text)}"'
                + ("" if expected else "; the request matches no refusal topic of the policy"),
                confidence=0.9 if expected else 0.75,
            )
        )
    return out


def truncated(trace: Trace, policy: Policy, _: ModelInfo) -> list[Finding]:
    return [
        finding(
            trace,
            step,
            "truncated",
            "truncated",
            "1",
            f'step {step.step_index} stopped at max_tokens after {step.tokens_out} output tokens: "{quote(step.text)}"',
        )
        for step in trace.calls
        if step.finish_reason == "length"
    ]


DETECTORS: tuple[Detector, ...] = (
    Detector("upstream_data_missing", "1", upstream_data_missing),
    Detector("tool_error_ignored", "1", tool_error_ignored),
    Detector("loop", "1", loop),
    Detector("session_cost", "1", session_cost),
    Detector("context_overflow", "1", context_overflow),
    Detector("refusal", "1", refusal),
    Detector("truncated", "1", truncated),
)
ROUTE_OUTLIER = Detector("route_cost_outlier", "1", lambda *_: [])


def route_cost_outliers(traces: Sequence[Trace], policy: Policy) -> list[Finding]:
    """Sessions whose cost is far above their route's (a day's traces, grouped by service)."""
    t = policy.thresholds
    by_route: dict[str, list[Trace]] = {}
    for trace in traces:
        if trace.calls:
            by_route.setdefault(trace.service or "unknown", []).append(trace)
    out = []
    for route, members in by_route.items():
        if len(members) < t.route_outlier_min_sessions:
            continue
        costs = sorted(m.cost_usd for m in members)
        q1, median, q3 = statistics.quantiles(costs, n=4)
        fence = max(q3 + t.route_outlier_iqr_factor * (q3 - q1), t.route_outlier_median_factor * median)
        for trace in members:
            if trace.cost_usd > fence and fence > 0:
                step = max(trace.calls, key=lambda s: s.cost_usd or 0.0)
                out.append(
                    finding(
                        trace,
                        step,
                        "cost_anomaly",
                        ROUTE_OUTLIER.name,
                        ROUTE_OUTLIER.version,
                        f"session cost {trace.cost_usd:.4f} USD is above route {route}'s fence {fence:.4f} "
                        f"(median {median:.4f}, {len(members)} sessions); costliest step {step.step_index}",
                        confidence=0.7,
                    )
                )
    return out


def unknown_models(traces: Sequence[Trace], models: ModelInfo | None = None) -> list[str]:
    """Models the model-info table does not know: context_overflow could not check their calls."""
    models = models or load_model_info()
    names = {s.model for t in traces for s in t.calls if s.model}
    return sorted(n for n in names if models.context_window(n) is None)


def detect(traces: Sequence[Trace], policy: Policy, models: ModelInfo | None = None) -> list[Finding]:
    """Every detector over every trace, plus the per-route cost outliers of the set."""
    models = models or load_model_info()
    out = [f for trace in traces for d in DETECTORS for f in d.run(trace, policy, models)]
    flagged = {(f.trace_id, f.error_class) for f in out}
    out += [f for f in route_cost_outliers(traces, policy) if (f.trace_id, f.error_class) not in flagged]
    return out


def versions() -> dict[str, str]:
    return {d.name: d.version for d in (*DETECTORS, ROUTE_OUTLIER)}
