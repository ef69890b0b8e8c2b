"""One day of the judge stage, as plain data in and rows out (the assets and the CLI call these)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from pipelines.judge import heuristics, sampling, state
from pipelines.judge.calibration import calibration_rows
from pipelines.judge.findings import Finding, finding_rows
from pipelines.judge.llm_judge import JudgeRun, LLMRunner, judge
from pipelines.judge.model_info import load_model_info
from pipelines.judge.policy import Policy
from pipelines.judge.timeline import Trace, build_traces

POSITIVE = {"up", "thumbs_up", "positive", "good", "helpful"}


@dataclass
class DayFindings:
    traces: list[Trace]
    heuristic: list[Finding]
    selections: dict[str, sampling.Selection]
    judged: JudgeRun
    rows: list[dict[str, Any]]
    calibration: list[dict[str, Any]]
    unknown_models: list[str] = field(default_factory=list)

    @property
    def by_class(self) -> Counter:
        return Counter(r["error_class"] for r in self.rows)


def day_traces(
    spans: Iterable[Mapping[str, Any]], calls: Iterable[Mapping[str, Any]], trace_ids: set[str]
) -> list[Trace]:
    """The traces of a day (ids from `traces`), from spans and calls read around it."""
    return [t for t in build_traces(spans, calls) if t.trace_id in trace_ids]


def first_days(traces: Iterable[Trace]) -> dict[str, date]:
    return {t.trace_id: min(s.ts for s in t.steps).date() for t in traces}


def find_errors(
    traces: list[Trace],
    policy: Policy,
    llm: LLMRunner | None,
    warehouse: Any,
    run_id: str,
    day: date,
    now: datetime,
    human: dict[str, bool] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> DayFindings:
    """Heuristics on every trace, then the LLM judge on the sampled ones."""
    models = load_model_info()
    found = heuristics.detect(traces, policy, models)
    selections = sampling.select(traces, found, policy)
    judged = judge(traces, selections, policy, llm, warehouse, run_id, progress)
    probabilities = {t: s.probability for t, s in selections.items()}
    occurred = {t.trace_id: day for t in traces}
    heuristic_rows = finding_rows(found, occurred, {t: 1.0 for t in occurred})
    judge_rows = finding_rows(judged.findings, occurred, probabilities)
    rows = {r["finding_id"]: r for r in heuristic_rows + judge_rows}
    human = human if human is not None else _human_labels(traces)
    calibration = calibration_rows(judged.judgements, human, day, now)
    return DayFindings(
        traces, found, selections, judged, list(rows.values()), calibration, heuristics.unknown_models(traces, models)
    )


def _human_labels(traces: list[Trace]) -> dict[str, bool]:
    """A person's verdict where the trace has feedback: thumbs down = bad; a positive label = good."""
    out = {}
    for t in traces:
        labels = {str(s.attributes.get("feedback", "")).lower() for s in t.steps if s.event_type == "session.end"}
        if any(s.feedback_negative for s in t.steps):
            out[t.trace_id] = True
        elif labels & POSITIVE:
            out[t.trace_id] = False
    return out


def violations(traces: list[Trace], day: date) -> list[dict[str, Any]]:
    return state.violation_rows(traces, {t.trace_id: day for t in traces})
