"""`tracelake demo | demo-data | run | tables | migrate | sql | frozen-call-schema`: stages and tables."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from datetime import date, timedelta

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pipelines.cli.app import QUIET, RUN_TAGS, app, console, days_between, out, yesterday

# the demo's share of long-prompt (support.kb) calls: enough for its candidate to show cache reads
DEMO_LONG_PROMPT_SHARE = 0.01
# the demo's share of identity-check (account.verify) calls: its last day replays them exactly
DEMO_VERIFY_SHARE = 0.01


@app.command("demo-data")
def demo_data(
    out_uri: str = typer.Option(None, "--out", help="Folder or s3://bucket/prefix (default: TRACELAKE_SOURCE)"),
    calls: int = typer.Option(2000, help="Model calls per day"),
    days: int = typer.Option(3, help="Number of days, ending on --end"),
    seed: int = typer.Option(7, help="Random seed: the same seed writes the same bytes"),
    end: str = typer.Option(None, help="Last day, YYYY-MM-DD (default: yesterday, UTC)"),
    stores: str = typer.Option(None, help="Where to write the ingredient stores (default: TRACELAKE_STORES)"),
    long_prompt_calls: int = typer.Option(
        0, "--long-prompt-calls", help="support.kb calls per day with ~5,000-token prompts (pipelines/demo/kb.py)"
    ),
    verify_calls: int = typer.Option(
        0, "--verify-calls", help="account.verify calls per day, with a tax id (pipelines/demo/verify.py)"
    ),
) -> None:
    """Write realistic synthetic traces (and the stores they were rendered from)."""
    from pipelines.demo import generate
    from pipelines.settings import Settings

    settings = Settings.from_env()
    last = date.fromisoformat(end) if end else yesterday()
    target = out_uri or settings.source_uri
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        task = progress.add_task("generating days", total=days)

        def advance(day: str, n: int, total: int) -> None:
            progress.update(task, completed=n, description=f"generated {day}")

        summary = generate(
            target,
            calls,
            days,
            seed,
            last,
            stores_out=stores or settings.stores_uri,
            endpoint_url=settings.endpoint_url,
            progress=advance,
            long_prompt_calls=long_prompt_calls,
            verify_calls=verify_calls,
        )
    console.print(
        f"[green]wrote[/] {summary.objects} objects ({summary.bytes_written / 1e6:.1f} MB), "
        f"{summary.calls} calls, {summary.sessions} agent sessions for {summary.days[0]}..{summary.days[-1]} "
        f"to {target}; stores in {summary.stores or '(not written)'}"
    )


@contextmanager
def _demo_llm(settings):
    """The LLM the demo replays against: tracelake's simulator, in-process on a free
    loopback port, unless the environment names a real backend (TRACELAKE_LLM / ANTHROPIC_API_KEY)."""
    if settings.llm_backend not in ("off", "simulator") or (
        settings.llm_backend == "simulator" and settings.llm_base_url
    ):
        yield
        return
    from pipelines.simulator import running

    with running() as sim:
        saved = {k: os.environ.get(k) for k in sim.env()}
        os.environ.update(sim.env())
        console.print(f"[magenta]LLM simulator[/] at {sim.url}: judge verdicts and replays below are simulated")
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@contextmanager
def _encrypted_demo_day():
    """Encrypt mode for the block; the demo's published replay key for the rest of the command
    (the replays after it decrypt with it), unless the environment sets a key of its own."""
    from pipelines.replay.unlock import DEMO_REPLAY_KEY

    if not os.environ.get("TRACELAKE_REDACTION_KEY", "").strip():
        os.environ["TRACELAKE_REDACTION_KEY"] = DEMO_REPLAY_KEY
    mode = os.environ.get("TRACELAKE_REDACTION_MODE")
    os.environ["TRACELAKE_REDACTION_MODE"] = "encrypt"
    try:
        yield
    finally:
        if mode is None:
            os.environ.pop("TRACELAKE_REDACTION_MODE", None)
        else:
            os.environ["TRACELAKE_REDACTION_MODE"] = mode


@app.command()
def demo(
    calls: int = typer.Option(2000, help="Model calls per day"),
    days: int = typer.Option(3, help="Days of traces, ending yesterday (UTC)"),
    seed: int = typer.Option(7, help="Random seed"),
) -> None:
    """Generate demo traces, run the nightly job on each day, and show what was produced."""
    from pipelines.cli.replay import run_replay_stage
    from pipelines.demo.registry import install
    from pipelines.redact.keys import DEMO_VARIABLE
    from pipelines.replay.unlock import DEMO_REPLAY_KEY
    from pipelines.settings import Settings

    last = yesterday()
    first = last - timedelta(days=days - 1)
    # the demo opts into the published demo hash key (unless a real one is set), and
    # its partitions start on its first day (read when the definitions are built below)
    if not os.environ.get("TRACELAKE_HASH_KEY", "").strip():
        os.environ[DEMO_VARIABLE] = "1"
    os.environ.setdefault("TRACELAKE_START_DATE", first.isoformat())
    demo_data(
        out_uri=None,
        calls=calls,
        days=days,
        seed=seed,
        end=last.isoformat(),
        stores=None,
        long_prompt_calls=round(calls * DEMO_LONG_PROMPT_SHARE),
        verify_calls=max(1, round(calls * DEMO_VERIFY_SHARE)),
    )
    settings = Settings.from_env()
    # the nightly job's judge and the replays both talk to the simulator (unless a real backend is set)
    with _demo_llm(settings):
        if first < last:
            run(stage="nightly", day=first.isoformat(), to=(last - timedelta(days=1)).isoformat())
        # the last day is ingested in encrypt mode and replayed with the demo's published replay key:
        # its account.verify replays are exact, the other days' approximate
        with _encrypted_demo_day():
            run(stage="nightly", day=last.isoformat(), to=last.isoformat())
        run_replay_stage(first, last, install(settings.candidates_uri, settings.endpoint_url))
    from pipelines.demo.sensor_cursor import settle_source_sensor
    from pipelines.instance import open_instance

    # `make ui` on this state starts no ingest: the source sensor knows these objects
    settle_source_sensor(open_instance(), settings.object_store())
    tables()
    from pipelines.cli.judge import show_rates

    show_rates(last - timedelta(days=days - 1), last)
    out.print(
        "\nTry:\n"
        '  tracelake sql "SELECT service, count(*) AS calls, avg(latency_ms) AS avg_ms, '
        'sum(usage.cost_usd) AS usd FROM calls GROUP BY service"\n'
        '  tracelake sql "SELECT status, count(*) AS calls FROM rot_checks GROUP BY status"\n'
        "  export TRACELAKE_DEMO=1    (other commands then use the demo hash key, as this run did)\n"
        f"  export TRACELAKE_REDACTION_KEY='{DEMO_REPLAY_KEY}'   (the demo's published replay key: "
        "replays of the last day's encrypted calls are then exact)\n"
        "  tracelake rot CALL_ID      (why a call's request no longer re-renders)\n"
        "  tracelake replay-report --candidate support-answer-v4   (per-segment replay summary + plot)\n"
        "  make ui                    (the Dagster UI)",
        soft_wrap=True,
    )


@app.command()
def run(
    stage: str = typer.Argument(
        ..., help="load, ingest, retention, rot, ... or nightly for all stages in order (ingest and nightly load first)"
    ),
    day: str = typer.Option(None, "--date", help="YYYY-MM-DD (default: yesterday, UTC)"),
    to: str = typer.Option(None, "--to", help="Run every day from --date to this day, inclusive"),
) -> None:
    """Materialize a stage for a day (or a range of days) in-process, with the same resources as Dagster."""
    from pipelines.definitions import build
    from pipelines.jobs import jobs

    names = [j.name for j in jobs]
    if stage not in names:
        raise typer.BadParameter(f"unknown stage {stage!r}; choose one of: {', '.join(names)}")
    first = date.fromisoformat(day) if day else yesterday()
    days = days_between(first, date.fromisoformat(to) if to else first)
    from pipelines.settings import start_date

    partitions_start = date.fromisoformat(start_date())
    if first < partitions_start:
        raise typer.BadParameter(
            f"{first} is before the first daily partition, {partitions_start} (TRACELAKE_START_DATE, by default "
            f"the first day `tracelake demo` fills): set TRACELAKE_START_DATE={first} (or earlier) and run again"
        )
    from pipelines.redact.keys import KeyRing, MissingKey

    try:
        KeyRing.from_env()  # before any run starts: a missing hash key is an error, not the demo key
    except MissingKey as e:
        raise typer.BadParameter(str(e)) from None
    if stage == "replay":  # candidate x day: every active candidate in the registry
        from pipelines.cli.replay import run_replay_stage

        run_replay_stage(days[0], days[-1])
        return
    definitions = build()  # resources from the environment as it is now
    from pipelines.instance import open_instance
    from pipelines.partitions import day_shard_key, shard_keys
    from pipelines.run_heartbeat import execute_in_process

    # ingest and nightly start with the load of every shard of the day (its own job: day x shard)
    load = definitions.resolve_job_def("load")
    steps = [] if stage == "load" else [(stage, definitions.resolve_job_def(stage), lambda d: d.isoformat())]
    if stage in ("load", "ingest", "nightly"):
        steps = [
            ("load " + shard, load, lambda d, s=shard: day_shard_key(d, s))
            for shard in shard_keys(definitions.get_repository_def())
        ] + steps
    instance = open_instance()  # created once, before any run, however many processes start at once
    failed = []
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        task = progress.add_task(f"{stage}", total=len(days) * len(steps))
        for d in days:
            for name, job, partition in steps:
                progress.update(task, description=f"{name} {d}")
                result = execute_in_process(  # with a heartbeat: killed, the run is failed by run monitoring
                    job, instance, partition_key=partition(d), raise_on_error=False, run_config=QUIET, tags=RUN_TAGS
                )
                progress.advance(task)
                if not result.success:  # the day's later steps need this one
                    failed.append(d)
                    break
    if failed:
        console.print(f"[red]{stage} failed for {', '.join(map(str, failed))}[/]; the run log above says why")
        raise typer.Exit(1)
    console.print(f"[green]{stage}[/] done for {days[0]}..{days[-1]}")


@app.command()
def tables() -> None:
    """List the warehouse tables with their row counts, versions and locations."""
    import polars as pl

    from pipelines.record.schema import TABLES
    from pipelines.settings import Settings

    warehouse = Settings.from_env().warehouse()
    table = Table(title=f"tracelake warehouse: {warehouse.uri}")
    for column in ("table", "rows", "version", "location"):
        table.add_column(column, justify="right" if column in ("rows", "version") else "left")
    for name in TABLES:
        delta = warehouse.table(name)
        if delta is None:
            table.add_row(name, "-", "-", "(not written yet)")
            continue
        rows = warehouse.scan(name).select(pl.len()).collect().item()
        table.add_row(name, f"{rows:,}", str(delta.version()), warehouse.table_uri(name))
    out.print(table)


@app.command()
def migrate() -> None:
    """Rewrite a warehouse written by an older tracelake in the current table layout, and verify it.

    Each table is rewritten in one commit and checked row for row against the version it
    replaced; a second run skips what is done (safe after a kill). Run it while nothing else writes."""
    from pipelines.migration.rewrite import MigrationMismatch, migrate
    from pipelines.settings import Settings

    warehouse = Settings.from_env().warehouse()

    def report(table) -> None:
        if table.status == "rewritten":
            orphans = f"; {table.orphans} name a call deleted before (kept)" if table.orphans else ""
            out.print(f"{table.table}: {table.rows:,} rows rewritten and verified{orphans}", markup=False)
        elif table.status == "current":
            out.print(f"{table.table}: already in the current layout", markup=False)

    try:
        with console.status("rewriting tables in the current layout"):
            result = migrate(warehouse, progress=report)
    except MigrationMismatch as e:
        console.print(f"[red]migration stopped:[/] {e}", markup=True, highlight=False)
        raise typer.Exit(1) from None
    done = ", ".join(result.rewritten) or "nothing to rewrite"
    out.print(f"{warehouse.uri}: {done}", markup=False, soft_wrap=True)


@app.command()
def sql(
    query: str = typer.Argument(..., help='e.g. "SELECT service, count(*) FROM calls GROUP BY service"'),
    limit: int = typer.Option(50, help="Rows to compute and print (pushed into the query)"),
    output: str = typer.Option("table", "--format", help="table, csv or json"),
) -> None:
    """Run SQL over the warehouse tables (DuckDB's dialect; the tables by name, nothing else is readable)."""
    import duckdb
    import polars as pl
    from rich.markup import escape

    from pipelines.printable import inert
    from pipelines.query import QueryRefused, run_query
    from pipelines.record.schema import TABLES
    from pipelines.settings import Settings

    warehouse = Settings.from_env().warehouse()
    try:
        result = run_query(query, {name: warehouse.dataset(name) for name in TABLES}, limit)
    except QueryRefused as e:
        console.print(f"[red]query refused:[/] {escape(inert(str(e)))}")
        raise typer.Exit(2) from None
    except duckdb.Error as e:
        console.print(f"[red]query failed:[/] {escape(inert(str(e)))}")
        raise typer.Exit(2) from None
    frame = result.frame
    # plain writes, never rich: a value such as "[red]" or an ESC sequence is shown, not obeyed
    if output == "csv":
        sys.stdout.write(inert(frame.write_csv()))
    elif output == "json":
        sys.stdout.write(inert(frame.write_json()) + "\n")
    else:
        with pl.Config(tbl_rows=limit, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200):
            sys.stdout.write(inert(str(frame)) + "\n")
        more = f" (limit {limit} reached; more rows not computed: raise --limit)" if result.truncated else ""
        console.print(f"{frame.height} rows{more}", markup=False, highlight=False)


@app.command("frozen-call-schema")
def frozen_call_schema() -> None:
    """Print the JSON Schema of frozen-call JSON v1 (published as pipelines/formats/frozen_call_v1.schema.json)."""
    import json

    from pipelines.formats.frozen_call import json_schema

    sys.stdout.write(json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n")
