"""How the replay assets show a candidate in the UI: the window view's decision keys,
real tables (``dg.TableMetadataValue`` with a schema), the plot written beside the
tables and linked, and the verdict as warn asset checks on ``replay_summary``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from pipelines.replay.report import SEGMENT_COLUMNS, plot_deltas, segment_table_rows
from pipelines.replay.window import CHECKS, Outcome, WindowView

INTS = frozenset({"n", "improved", "regressed", "same", "inconclusive"})
# the examples' columns: no call id (Dagster keeps metadata where `tracelake forget` cannot reach;
# `tracelake replay-report` prints the ids), outputs as stored (redacted), cut short
EXAMPLE_COLUMNS = ("day", "segment_key", "mode", "fidelity", "decided_by", "old_output", "new_output")

SUMMARY_CHECK_SPECS = [
    dg.AssetCheckSpec(name, asset="replay_summary", description=description, blocking=False)
    for name, description in CHECKS.items()
]


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> dg.MetadataValue:
    """Rows as a table the UI renders (sortable, with a schema), not markdown."""
    schema = dg.TableSchema(columns=[dg.TableColumn(c, "int" if c in INTS else "string") for c in columns])
    records = [
        dg.TableRecord({c: (r.get(c) if c in INTS else ("" if r.get(c) is None else str(r.get(c)))) for c in columns})
        for r in rows
    ]
    return dg.MetadataValue.table(records=records, schema=schema)


def segment_table(summary: Sequence[Mapping[str, Any]]) -> dg.MetadataValue:
    return table(segment_table_rows(summary), SEGMENT_COLUMNS)


def report_dir(warehouse_uri: str) -> Path:
    """Where the plots go: beside a local warehouse (its parent's ``reports``), else ``.tracelake/reports``."""
    if "://" in warehouse_uri and not warehouse_uri.startswith("file://"):
        return Path(".tracelake") / "reports"
    return Path(warehouse_uri.removeprefix("file://")).expanduser().resolve().parent / "reports"


def write_plot(view: WindowView, warehouse_uri: str) -> Path | None:
    if not any(r["delta"] is not None for r in view.summary):
        return None
    path = report_dir(warehouse_uri) / "replay" / f"{view.candidate}.png"
    return plot_deltas(view.summary, path, f"{view.candidate}: per-segment delta pooled over {view.span}")


def window_metadata(view: WindowView, plot: Path | None) -> dict[str, Any]:
    """The decision first: verdict, flags, the pooled table, the plot, cost per call, fidelity, examples."""
    cost = view.cost
    per_call = (
        f"candidate ${cost['candidate_usd_per_call']:.5f} vs baseline ${cost['baseline_usd_per_call']:.5f} per call"
        if cost["candidate_usd_per_call"] is not None and cost["baseline_usd_per_call"] is not None
        else "no paired baseline (compared with the recorded answer)"
    )
    return {
        "verdict": view.verdict(),
        "hides_regression": dg.MetadataValue.bool(bool(view.hidden)),
        "regressed_segments": ", ".join(view.regressed) or "none",
        "window": view.span,
        "window_segments": segment_table(view.summary),
        "window_plot": dg.MetadataValue.url(plot.resolve().as_uri()) if plot else "no deltas to plot",
        "window_plot_path": dg.MetadataValue.path(str(plot.resolve())) if plot else "",
        "cost_per_call": per_call,
        "window_cost_usd": cost["rows_usd"],
        "window_judge_cost_usd": cost["judge_usd"],
        "window_tokens": dg.MetadataValue.json(view.tokens),
        "window_fidelity": dg.MetadataValue.json(view.fidelity),
        "regressed_examples": table(view.examples, EXAMPLE_COLUMNS)
        if view.examples
        else dg.MetadataValue.md("_no regressed replay in the window_"),
    }


def check_results(outcomes: Sequence[Outcome], plot: Path | None) -> list[dg.AssetCheckResult]:
    """Warn checks (never blocking): a failed one names the segments and links the evidence."""
    link = {"plot": dg.MetadataValue.url(plot.resolve().as_uri())} if plot else {}
    return [
        dg.AssetCheckResult(
            check_name=o.name,
            asset_key="replay_summary",
            passed=o.passed,
            severity=dg.AssetCheckSeverity.WARN,
            description=o.description,
            metadata={**{k: v for k, v in o.metadata.items() if v is not None}, **link},
        )
        for o in outcomes
    ]
