"""`tracelake replay | replay-report | candidates`: replay candidates against recorded days, read the result."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from pipelines.cli.app import QUIET, RUN_TAGS, app, console, days_between, out, said, shown, yesterday

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
                    tags=RUN_TAGS,  # listed under the replay job in the UI, like its scheduled runs
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


def _segment_tables(wide: Console, title: str, rows: list, simulated: bool) -> None:
    from pipelines.replay.report import SEGMENT_COLUMNS, group_of, segment_table_rows

    columns = [c for c in SEGMENT_COLUMNS if c not in ("mode", "fidelity", "model_basis")]
    for mode, fidelity, basis in sorted({group_of(r) for r in rows}):
        group = [r for r in rows if group_of(r) == (mode, fidelity, basis)]
        on = ", on retired models' substitutes" if basis == "substituted" else ""
        heading = Text.assemble(
            shown(f"{title}: {mode} replay, {fidelity} fidelity{on}"),
            Text(" (simulated LLM)", style="magenta") if simulated else "",
        )
        table = Table(title=heading)
        for column in columns:
            table.add_column(
                column, justify="left" if column in ("segment_key", "flag") else "right", no_wrap=column != "flag"
            )
        for r in segment_table_rows(group):
            style = "bold red" if r["flag"] in ("regresses", "HIDES A REGRESSION") else None
            table.add_row(*(shown(r[c]) for c in columns), style=style)
        wide.print(table)


def report(
    candidate: str, first: date | None = None, last: date | None = None, plot: Path | None = None
) -> Path | None:
    """Print a candidate's window view (the same as ``replay_summary``'s in the UI: every day pooled,
    the verdict as checks, cost per call, fidelity, regressed examples with their call ids), then each
    day's per-segment table; write the pooled plot; returns the PNG's path."""
    import polars as pl

    from pipelines.replay.candidates import CandidateError
    from pipelines.replay.report import plot_deltas
    from pipelines.replay.window import checks, pool, request_costs
    from pipelines.settings import Settings

    settings = Settings.from_env()
    warehouse = settings.warehouse()
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
    window = warehouse.read("replays", where).to_dicts()
    view = pool(window, candidate, request_costs(warehouse, window))
    simulated = any(r["simulated"] for r in summary)
    # the per-segment table needs ~130 columns; wider than a pipe's default 80
    wide = Console(width=max(out.width, 150))
    wide.print(said("verdict:", "bold red" if view.regressed else "bold green", view.verdict()))
    _segment_tables(wide, f"{candidate} over {view.span}, pooled", view.summary, simulated)
    try:
        budget = settings.candidate_registry().get(candidate).budget_usd
    except CandidateError:
        budget = None
    for outcome in checks(view, budget):
        wide.print(
            said("ok  " if outcome.passed else "FAIL", "green" if outcome.passed else "bold red", outcome.name),
            shown(f": {outcome.description}"),
        )
    cost = view.cost
    if cost["candidate_usd_per_call"] is not None and cost["baseline_usd_per_call"] is not None:
        wide.print(
            shown(
                f"cost per call: candidate ${cost['candidate_usd_per_call']:.5f} vs baseline "
                f"${cost['baseline_usd_per_call']:.5f} ({cost['calls_sent']} calls); judge ${cost['judge_usd']:.4f}"
            )
        )
    wide.print(shown(f"tokens: {view.tokens['input']:,} in, {view.tokens['output']:,} out; fidelity: {view.fidelity}"))
    for example in view.examples:
        wide.print(
            said("regressed", "red", f"{example['call_id']} {example['day']} {example['segment_key']}"),
            shown(f" ({example['decided_by']}): old {example['old_output']!r} -> new {example['new_output']!r}"),
        )
    for d in sorted({r["day"] for r in summary}):
        rows = [r for r in summary if r["day"] == d]
        _segment_tables(wide, f"{candidate} on {d}", rows, any(r["simulated"] for r in rows))
    days = sorted({r["day"] for r in summary})
    cost_usd = sum(r["cost_usd"] for r in summary if r["segment_key"] == "all")
    console.print(shown(f"replay cost for {candidate}: ${cost_usd:.4f} over {len(days)} day(s)"))
    path = plot or REPORTS / f"{candidate}.png"
    plot_deltas(view.summary, path, f"{candidate}: per-segment delta pooled over {view.span}")
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
def candidates(
    action: str = typer.Argument(None, metavar="[new]", help="new: write a minimal candidate file"),
    slug: str = typer.Argument(None, metavar="[ID]", help="With new: the candidate id (a slug)"),
) -> None:
    """List the candidates in the registry and the files it rejected; `candidates new ID` writes a
    minimal candidate file ID.yaml into the registry (TRACELAKE_CANDIDATES) to edit."""
    from pipelines.replay.candidates import example_yaml, parse_candidate, slug_problem
    from pipelines.settings import Settings

    settings = Settings.from_env()
    registry = settings.candidate_registry()
    if action is not None:
        if action != "new" or not slug:
            raise typer.BadParameter("use `tracelake candidates` or `tracelake candidates new ID`")
        problem = slug_problem(slug)
        if problem:
            raise typer.BadParameter(problem, param_hint="ID")
        if registry.files.read(f"{slug}.yaml") is not None:
            console.print(said("exists:", "yellow", registry.files.where(f"{slug}.yaml")), "; nothing written")
            raise typer.Exit(1)
        from pipelines.demo.objects import ObjectWriter

        text = example_yaml(slug)
        parse_candidate(text, f"{slug}.yaml")  # what it writes is a valid candidate
        ObjectWriter(registry.uri, settings.endpoint_url).put(f"{slug}.yaml", text.encode())
        out.print(shown(f"wrote {registry.files.where(f'{slug}.yaml')}: edit it; the UI shows it as a partition"))
        return
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
