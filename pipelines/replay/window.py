"""One view per candidate over a window of days: every replay of the window pooled
into one per-segment summary (``summarize``: Wilson intervals, sign tests and
Benjamini-Hochberg across the segments, over the whole window), the hidden-
regression flag, cost per call for the candidate and its paired baseline, tokens,
the fidelity mix and a few regressed examples; and the verdict as checks a person
deciding on a prompt change reads first.

Pure: rows in, a ``WindowView`` out. ``replay_summary`` (Dagster) and
``tracelake replay-report`` both show it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from pipelines.replay.report import group_of
from pipelines.replay.summary import ALL, summarize

# a replay a person reads when more than this share of the window's sent replays is approximate
MOSTLY_APPROXIMATE = 0.5
EXAMPLES = 5
EXCERPT = 160

HIDES_REGRESSION = "aggregate_hides_a_segment_regression"
SEGMENT_REGRESSES = "a_segment_regresses_significantly"
MOSTLY_APPROX = "replay_fidelity_mostly_approximate"
OVER_BUDGET = "cost_over_the_candidates_budget"
CHECKS = {
    HIDES_REGRESSION: "Fails when the candidate's aggregate improves over the window while a segment "
    "significantly regresses (sign test, Benjamini-Hochberg across segments): the average hides it.",
    SEGMENT_REGRESSES: "Fails when any segment regresses significantly over the window (BH-adjusted p < 0.05).",
    MOSTLY_APPROX: "Fails when more than half of the window's replays are approximate (rotted ingredients, "
    "redacted placeholders, substituted models): the comparison is weaker than it looks.",
    OVER_BUDGET: "Fails when the window's replays and judge cost more than the candidate's `budget_usd`.",
}


@dataclass
class Outcome:
    """One check's result, plain (the asset turns it into an AssetCheckResult)."""

    name: str
    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class WindowView:
    candidate: str
    days: list[date]
    summary: list[dict[str, Any]]  # pooled: one row per mode x fidelity x model basis x segment
    fidelity: dict[str, int]
    cost: dict[str, float | int | None]
    tokens: dict[str, int]
    examples: list[dict[str, Any]]

    @property
    def totals(self) -> list[dict[str, Any]]:
        return [r for r in self.summary if r["segment_key"] == ALL]

    @property
    def hidden(self) -> list[str]:
        """Segments whose significant regression an improving aggregate hides."""
        return sorted({s for r in self.totals if r["hides_regression"] for s in r["regressed_segments"]})

    @property
    def regressed(self) -> list[str]:
        return sorted(
            {r["segment_key"] for r in self.summary if r["segment_key"] != ALL and r["significant_regression"]}
        )

    @property
    def span(self) -> str:
        if not self.days:
            return "no days"
        first, last = self.days[0], self.days[-1]
        return f"{first}..{last} ({len(self.days)} day{'s' if len(self.days) > 1 else ''})"

    def verdict(self) -> str:
        """One line: what a person deciding on the change reads first."""
        if not self.summary:
            return f"{self.candidate}: nothing replayed yet"
        if self.hidden:
            return (
                f"DO NOT SHIP as is: the aggregate improves but hides significant regressions in "
                f"{', '.join(self.hidden)} over {self.span}"
            )
        if self.regressed:
            return f"DO NOT SHIP as is: {', '.join(self.regressed)} regress significantly over {self.span}"
        improving = [r for r in self.totals if r["significant_improvement"]]
        if improving:
            return f"no significant regression; the aggregate improves significantly over {self.span}"
        return f"no significant regression or improvement over {self.span}"


def _final(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if r.get("verdict") is not None or r.get("fidelity") == "ineligible"]


def _excerpt(text: str | None) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"


def pool(
    rows: Iterable[Mapping[str, Any]],
    candidate: str,
    request_costs: Mapping[str, float] | None = None,
) -> WindowView:
    """The window view of a candidate's ``replays`` rows (any number of days).

    ``request_costs``: USD by ``request_key`` from the ledger (``llm_requests``), to split a
    diff replay's cost between the candidate's request and its paired baseline."""
    rows = list(rows)
    days = sorted({r["day"] for r in rows})
    summary = summarize(rows, candidate, days[-1]) if rows else []
    for r in summary:
        r.pop("day", None)  # pooled over the window, not one day's
    final = _final(rows)
    costs = request_costs or {}
    sent = [r for r in final if r.get("request_key")]
    paired = [r for r in sent if r.get("baseline_request_key")]
    candidate_usd = sum(costs.get(r["request_key"], 0.0) for r in sent)
    baseline_usd = sum(costs.get(r["baseline_request_key"], 0.0) for r in paired)
    cost = {
        "calls_sent": len(sent),
        "candidate_usd_per_call": round(candidate_usd / len(sent), 6) if sent and costs else None,
        "baseline_usd_per_call": round(baseline_usd / len(paired), 6) if paired and costs else None,
        "judge_usd": round(sum(r.get("judge_cost_usd") or 0.0 for r in rows), 6),
        "rows_usd": round(sum((r.get("cost_usd") or 0.0) + (r.get("judge_cost_usd") or 0.0) for r in rows), 6),
    }
    tokens = {
        "input": sum((r.get("input_tokens") or 0) + (r.get("cache_read_input_tokens") or 0) for r in rows),
        "output": sum(r.get("output_tokens") or 0 for r in rows),
    }
    regressed = sorted(
        (r for r in final if r.get("verdict") == "regressed"),
        key=lambda r: (r["segment_key"], str(r["day"]), r.get("replay_id") or ""),
    )
    # one per segment first, so a handful covers the segments that regress
    picked, seen = [], set()
    for r in regressed:
        if r["segment_key"] not in seen:
            seen.add(r["segment_key"])
            picked.append(r)
    picked += [r for r in regressed if r not in picked]
    examples = [
        {
            "call_id": r.get("call_id"),
            "day": str(r["day"]),
            "segment_key": r["segment_key"],
            "mode": r["mode"],
            "fidelity": r["fidelity"],
            "decided_by": r.get("decided_by") or "",
            "old_output": _excerpt(r.get("old_output")),
            "new_output": _excerpt(r.get("new_output")),
        }
        for r in picked[:EXAMPLES]
    ]
    return WindowView(
        candidate=candidate,
        days=days,
        summary=summary,
        fidelity=dict(Counter(r["fidelity"] for r in final)),
        cost=cost,
        tokens=tokens,
        examples=examples,
    )


def _segments_of(view: WindowView, segments: list[str]) -> list[str]:
    """The groups (mode / fidelity / model basis) each named segment regresses in."""
    where = [
        f"{r['segment_key']} ({'/'.join(group_of(r))}: {r['regressed']} regressed vs {r['improved']} improved "
        f"of {r['n']}, BH p={r['bh_p']:.3g})"
        for r in view.summary
        if r["segment_key"] in segments and r["significant_regression"]
    ]
    return where


def checks(view: WindowView, budget_usd: float | None) -> list[Outcome]:
    """The verdict as four checks, each naming what failed and where the evidence is."""
    evidence = f"tracelake replay-report --candidate {view.candidate}"
    out = []
    hidden = view.hidden
    out.append(
        Outcome(
            HIDES_REGRESSION,
            not hidden,
            (
                f"{view.candidate} improves the aggregate over {view.span} while these segments significantly "
                f"regress: {'; '.join(_segments_of(view, hidden))}"
            )
            if hidden
            else f"no improving aggregate hides a segment regression over {view.span}",
            {"segments": ", ".join(hidden) or "none", "evidence": evidence},
        )
    )
    regressed = view.regressed
    out.append(
        Outcome(
            SEGMENT_REGRESSES,
            not regressed,
            f"significant regressions over {view.span}: {'; '.join(_segments_of(view, regressed))}"
            if regressed
            else f"no segment regresses significantly over {view.span}",
            {"segments": ", ".join(regressed) or "none", "evidence": evidence},
        )
    )
    exact, approximate = view.fidelity.get("exact", 0), view.fidelity.get("approximate", 0)
    share = approximate / (exact + approximate) if exact + approximate else 0.0
    out.append(
        Outcome(
            MOSTLY_APPROX,
            share <= MOSTLY_APPROXIMATE,
            f"{approximate} of {exact + approximate} replays sent over {view.span} are approximate ({share:.0%})",
            {"approximate_share": round(share, 4), **{f"replays_{k}": v for k, v in sorted(view.fidelity.items())}},
        )
    )
    spent = float(view.cost["rows_usd"] or 0.0)
    out.append(
        Outcome(
            OVER_BUDGET,
            budget_usd is None or spent <= budget_usd,
            f"replays cost ${spent:.4f} over {view.span}; "
            + (
                f"the candidate's budget is ${budget_usd:.4f}"
                if budget_usd is not None
                else "the candidate sets no budget_usd"
            ),
            {"cost_usd": round(spent, 6), "budget_usd": budget_usd},
        )
    )
    return out


def request_costs(warehouse, rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """USD by request key from the ledger (``llm_requests``, read through ``warehouse``), for the
    requests and paired baselines of ``rows``."""
    import polars as pl

    keys = {k for r in rows for k in (r.get("request_key"), r.get("baseline_request_key")) if k}
    if not keys:
        return {}
    found = warehouse.read("llm_requests", pl.col("request_key").is_in(sorted(keys)), ["request_key", "cost_usd"])
    return {k: float(v or 0.0) for k, v in found.iter_rows()}
