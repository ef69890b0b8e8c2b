"""`tracelake errors`: semantic-error rates per class with intervals, violations, and what the judge cost."""

from __future__ import annotations

from datetime import date

import typer
from rich.table import Table

from pipelines.cli.app import app, console, out, yesterday


def show_rates(first: date, last: date) -> None:
    """Print, for the days first..last, each class's rate with its 95% interval, the state
    violations by code, and the judge's requests and cost (the demo calls this)."""
    import polars as pl

    from pipelines.judge import watch
    from pipelines.settings import Settings

    warehouse = Settings.from_env().warehouse()
    window = pl.col("occurred_date").is_between(first, last)
    if warehouse.table("semantic_errors") is None:
        console.print("[yellow]no semantic_errors yet[/]: run `tracelake run judge --date D` first")
        return
    traces = warehouse.read("traces", window, ["trace_id"]).height
    findings = warehouse.read("semantic_errors", window)
    table = Table(title=f"Semantic errors {first}..{last} ({traces} traces; 95% Wilson intervals, weighted 1/p)")
    for column in ("class", "findings", "estimated traces", "rate", "95% interval"):
        table.add_column(column, justify="left" if column == "class" else "right")
    for r in watch.rates(findings, traces):
        table.add_row(
            r.error_class, str(r.findings), f"{r.estimated:.1f}", f"{r.rate:.2%}", f"{r.low:.2%} – {r.high:.2%}"
        )
    expected = findings.filter(~pl.col("is_error")).group_by("error_class").len()
    for row in expected.iter_rows(named=True):
        table.add_row(f"[dim]{row['error_class']} (expected, not an error)[/]", str(row["len"]), "", "", "")
    out.print(table)
    if warehouse.table("state_violations") is not None:
        first_codes = (
            warehouse.read("state_violations", window & pl.col("first_in_trace"), ["code"])
            .group_by("code")
            .len()
            .sort("len", descending=True)
        )
        codes = ", ".join(f"{r['code']} {r['len']}" for r in first_codes.iter_rows(named=True)) or "none"
        out.print(f"State violations (first per trace): {codes}")
    judged = findings.filter(pl.col("detector").str.starts_with("llm_judge:"))
    if warehouse.table("llm_requests") is not None:
        ledger = warehouse.read("llm_requests", pl.col("purpose") == "judge", ["cost_usd", "simulated"])
        label = " (simulated)" if ledger["simulated"].any() else ""
        out.print(f"LLM judge: {ledger.height} requests in the ledger, ${ledger['cost_usd'].sum():.4f}{label}")
    elif judged.is_empty():
        out.print("LLM judge: skipped (no LLM configured: set TRACELAKE_LLM); heuristics and validator ran")


@app.command()
def errors(
    day: str = typer.Option(None, "--date", help="YYYY-MM-DD (default: yesterday, UTC)"),
    to: str = typer.Option(None, "--to", help="Last day, inclusive (default: --date)"),
) -> None:
    """Semantic-error rates per class with intervals, state violations and judge cost for a day or range."""

    first = date.fromisoformat(day) if day else yesterday()
    show_rates(first, date.fromisoformat(to) if to else first)
