"""`tracelake replay | replay-report | candidates`: replay candidates against recorded days, read the result."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from pipelines.cli.app import QUIET, app, console, days_between, out, said, shown, yesterday

REPORTS = Path(".tracelake") / "reports"


def replay_days(candidate_ids: list[str], days: list[date]) -> list[tuple[str, date]]:
    """Materialize `replays` and `replay_summary` for each candidate x day in-process
    (the Dagster job `replay`, same resources); returns the partitions that failed."""
    from pipelines.definitions import build
    from pipelines.instance import open_instance
    from pipelines.partitions import CANDIDATE_PARTITIONS, candidate_day_key
    from pipelines.run_heartbeat import execute_in_process
    from pipelines.settings import Settings

    registry = Settings.from_env().candidate_registry()
    for candidate_id in candidate_ids:
        registry.get(candidate_id)  # a clear error before anything runs
    instance = open_instance()
    known = set(instance.get_dynamic_partitions(CANDIDATE_PARTITIONS))
    new = [c for c in candidate_ids if c not in known]
    if new:
        instance.add_dynamic_partitions(CANDIDATE_PARTITIONS, new)
    job = build().resolve_job_def("replay")
    failed = []
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        task = progress.add_task("replay", total=len(candidate_ids) * len(days))
        for candidate_id in candidate_ids:
            for d in days:
                progress.update(task, description=f"replay {candidate_id} {d}")
                result = execute_in_process(
                    job,
                    instance,
                    partition_key=candidate_day_key(candidate_id, d),
                    raise_on_error=False,
                    run_config=QUIET,
                )
                if not result.success:
                    failed.append((candidate_id, d))
                progress.advance(task)
    return failed


def active_candidates() -> list[str]:
    from pipelines.settings import Settings

    registry = Settings.from_env().candidate_registry()
    found, rejected = registry.load()
    for error in rejected:
        console.print(said("skipped", "yellow", error), soft_wrap=True)
    return sorted(c.id for c in found.values() if c.active)


def print_plans(candidate_ids: list[str], first: date, last: date) -> list[str]:
    """Print each candidate's replay plan over the window (nothing is sent); returns the blocked ones."""
    from assets.replay import day_inputs, plan_of
    from pipelines.resources.judge import JudgePolicy
    from pipelines.settings import Settings

    settings = Settings.from_env()
    warehouse, llm = settings.warehouse(), settings.llm()
    registry, templates = settings.candidate_registry(), settings.ingredient_stores()["template_store"]
    judge = JudgePolicy(path=settings.judge_policy).load().judge
    blocked = []
    read: dict[date, object] = {}  # each day's tables are read once for every candidate
    for candidate_id in candidate_ids:
        candidate = registry.get(candidate_id)
        days = [day_inputs(candidate, d, warehouse, templates, read.get(d)) for d in days_between(first, last)]
        read.update({d.day: d for d in days})
        plan = plan_of(days, llm, warehouse, judge.model)
        head, *rest = plan.lines()  # model names and reasons come from data: printed as text
        out.print(shown(head, "bold"), highlight=False, soft_wrap=True)
        for line in rest:
            out.print(shown(line, "red" if line.lstrip().startswith("STOP") else ""), highlight=False, soft_wrap=True)
        if plan.blocked:
            blocked.append(candidate_id)
    return blocked


def _valid(candidate_ids: list[str]) -> tuple[list[str], int]:
    """(the ids the registry holds a valid candidate for, how many it refused, each reported here)."""
    from pipelines.replay.candidates import CandidateError
    from pipelines.settings import Settings

    registry = Settings.from_env().candidate_registry()
    valid, refused = [], 0
    for candidate_id in candidate_ids:
        try:
            registry.get(candidate_id)
        except CandidateError as e:
            console.print(said("refused", "red", e), soft_wrap=True)
            refused += 1
        else:
            valid.append(candidate_id)
    return valid, refused


def run_replay_stage(first: date, last: date, candidate_ids: list[str] | None = None) -> None:
    """The replay stage for every active candidate (or the given ones) over a window, each
    candidate's plan printed first. A candidate the registry refuses is reported and left out;
    the others still run (exit 1 afterwards)."""
    ids = candidate_ids if candidate_ids is not None else active_candidates()
    ids, refused = _valid(ids)
    if not ids:
        if refused:
            raise typer.Exit(2)
        console.print("[yellow]no active candidates[/] in the registry (TRACELAKE_CANDIDATES); nothing replayed")
        return
    print_plans(ids, first, last)
    failed = replay_days(ids, days_between(first, last))
    if failed:
        console.print(
            said("replay failed for", "red", ", ".join(f"{c} {d}" for c, d in failed)),
            "; the run log above says why",
        )
    for candidate_id in ids:
        if all(c != candidate_id for c, _ in failed):
            report(candidate_id, first, last)
    if failed or refused:
        raise typer.Exit(1)


@app.command()
def replay(
    call_id: str = typer.Argument(None, metavar="[CALL_ID]", help="Replay this one call now (`tracelake show`)"),
    candidate: str = typer.Option(None, "--candidate", help="Candidate id (a slug in the registry)"),
    day: str = typer.Option(None, "--date", help="YYYY-MM-DD (default: yesterday, UTC)"),
    to: str = typer.Option(None, "--to", help="Replay every day from --date to this day, inclusive"),
    pinned: bool = typer.Option(False, "--pinned", help="With CALL_ID: at temperature 0"),
    n: int = typer.Option(1, "--n", min=1, max=200, help="With CALL_ID: samples at production settings"),
    plan: bool = typer.Option(
        False,
        "--plan",
        help="Print what the replay would send and cost (models, substitutes, dropped parameters, "
        "ledger hits, batches, budget) and send nothing",
    ),
) -> None:
    """Replay a candidate against recorded days (the `replays` and `replay_summary` assets, in-process),
    or with CALL_ID one call now: its fidelity and its divergence from the original. Each run prints
    its plan first; --plan prints only the plan."""
    from pipelines.replay.candidates import CandidateError

    if call_id is not None:
        from pipelines.cli.debug import replay_one_call

        return replay_one_call(call_id, pinned, n)
    if candidate is None:
        raise typer.BadParameter("give a CALL_ID, or --candidate ID to replay a candidate", param_hint="--candidate")

    first = date.fromisoformat(day) if day else yesterday()
    try:
        if plan:
            if print_plans([candidate], first, date.fromisoformat(to) if to else first):
                raise typer.Exit(3)
            return None
        run_replay_stage(first, date.fromisoformat(to) if to else first, [candidate])
    except CandidateError as e:
        console.print(shown(e, "red"), soft_wrap=True)
        raise typer.Exit(2) from None


def report(
    candidate: str, first: date | None = None, last: date | None = None, plot: Path | None = None
) -> Path | None:
    """Print a candidate's per-segment summary and write the plot; returns the PNG's path."""
    import polars as pl

    from pipelines.replay.report import SEGMENT_COLUMNS, group_of, plot_deltas, segment_table_rows
    from pipelines.settings import Settings

    warehouse = Settings.from_env().warehouse()
    where = pl.col("candidate") == candidate
    if first is not None:
        where = where & (pl.col("day") >= first) & (pl.col("day") <= (last or first))
    summary = warehouse.read("replay_summary", where).sort("day").to_dicts()
    if not summary:
        console.print(
            said("no replay summary for", "yellow", candidate),
            shown(f"; run `tracelake replay --candidate {candidate}`"),
        )
        return None
    days = sorted({r["day"] for r in summary})
    columns = [c for c in SEGMENT_COLUMNS if c not in ("mode", "fidelity", "model_basis")]
    # the per-segment table needs ~130 columns; wider than a pipe's default 80
    wide = Console(width=max(out.width, 150))
    for d in days:
        rows = [r for r in summary if r["day"] == d]
        simulated = Text(" (simulated LLM)", style="magenta") if any(r["simulated"] for r in rows) else ""
        for mode, fidelity, basis in sorted({group_of(r) for r in rows}):
            group = [r for r in rows if group_of(r) == (mode, fidelity, basis)]
            on = ", on retired models' substitutes" if basis == "substituted" else ""
            title = Text.assemble(shown(f"{candidate} on {d}: {mode} replay, {fidelity} fidelity{on}"), simulated)
            table = Table(title=title)
            for column in columns:
                table.add_column(
                    column, justify="left" if column in ("segment_key", "flag") else "right", no_wrap=column != "flag"
                )
            for r in segment_table_rows(group):
                style = "bold red" if r["flag"] in ("regresses", "HIDES A REGRESSION") else None
                table.add_row(*(shown(r[c]) for c in columns), style=style)
            wide.print(table)
        for r in rows:
            if r["segment_key"] == "all" and r["hides_regression"]:
                wide.print(
                    said(
                        "flag:",
                        "bold red",
                        f"{candidate} improves the {r['mode']}/{r['fidelity']} aggregate on {d} "
                        f"(delta {r['delta']:+.2f}) while these segments significantly regress: "
                        + ", ".join(r["regressed_segments"]),
                    )
                )
    cost = sum(r["cost_usd"] for r in summary if r["segment_key"] == "all")
    console.print(shown(f"replay cost for {candidate}: ${cost:.4f} over {len(days)} day(s)"))
    path = plot or REPORTS / f"{candidate}.png"
    plot_deltas(summary, path, f"{candidate}: per-segment delta, {days[0]}..{days[-1]}")
    console.print(shown(f"plot: {path}"))
    return path


@app.command("replay-report")
def replay_report(
    candidate: str = typer.Option(..., "--candidate", help="Candidate id"),
    day: str = typer.Option(None, "--date", help="First day (default: every day replayed)"),
    to: str = typer.Option(None, "--to", help="Last day"),
    plot: str = typer.Option(None, "--plot", help="Where to write the PNG (default .tracelake/reports/ID.png)"),
) -> None:
    """Print a candidate's per-segment replay summary (rich) and write a PNG of the per-segment deltas."""
    first = date.fromisoformat(day) if day else None
    if report(candidate, first, date.fromisoformat(to) if to else first, Path(plot) if plot else None) is None:
        raise typer.Exit(1)


@app.command()
def candidates() -> None:
    """List the candidates in the registry, and the files it rejected."""
    from pipelines.settings import Settings

    registry = Settings.from_env().candidate_registry()
    found, rejected = registry.load()
    table = Table(title=shown(f"candidates in {registry.uri}"))
    for column in ("id", "revision", "active", "changes", "modes", "description"):
        table.add_column(column, no_wrap=column != "description")
    for c in found.values():
        cells = (c.id, c.revision, c.active, ", ".join(c.changes), ", ".join(c.modes), c.description)
        table.add_row(*map(shown, cells))
    out.print(table)
    for error in rejected:
        console.print(said("rejected", "red", error), soft_wrap=True)
