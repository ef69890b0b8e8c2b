"""`tracelake simulate-llm`: run the Messages API simulator standalone;
`tracelake llm-ledger`: what the LLM resource sent, and what it cost."""

from __future__ import annotations

import signal
import time
from collections import Counter
from typing import Annotated

import typer
from rich.table import Table

from pipelines.cli.app import app, console, out


def simulate_llm(
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: any free port)")] = 0,
    fault_rate: Annotated[float, typer.Option("--fault-rate", help="Share of requests answered 429/529/500")] = 0.0,
    timeout_rate: Annotated[float, typer.Option("--timeout-rate", help="Share of messages left unanswered")] = 0.0,
    expire_batches: Annotated[int, typer.Option("--expire-batches", help="How many next batches expire")] = 0,
    batch_seconds: Annotated[float, typer.Option("--batch-seconds", help="Seconds a batch stays in progress")] = 0.0,
    seed: Annotated[int, typer.Option("--seed", help="Shifts every simulated draw")] = 0,
) -> None:
    """Serve tracelake's simulated Messages + Message Batches API until Ctrl-C (answers are labelled simulated)."""
    from pipelines.simulator import Faults, Simulator

    faults = Faults(rate=fault_rate, timeout_rate=timeout_rate, expire_batches=expire_batches, seed=seed)
    sim = Simulator(faults=faults, seed=seed, batch_seconds=batch_seconds, port=port).start()
    console.print(f"simulated Messages API on [bold]{sim.url}[/] (every answer is labelled simulated)")
    for name, value in sim.env().items():
        out.print(f"export {name}={value}")
    # SIGTERM (docker stop, kill) ends it like Ctrl-C: with the summary
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        sim.stop()
        routes = Counter((r.route, r.status) for r in sim.log)
        table = Table("route", "status", "requests", title=f"simulator: billed ${sim.billed_usd:.4f}")
        for (route, status), n in sorted(routes.items()):
            table.add_row(route, str(status or "timeout"), str(n))
        console.print(table)


def llm_ledger(
    run_id: Annotated[str | None, typer.Option("--run-id", help="Only this run's requests")] = None,
) -> None:
    """Requests sent through the LLM resource, by purpose, mode, candidate, model and status, with their cost."""
    import polars as pl

    from pipelines.settings import Settings

    frame = Settings.from_env().warehouse().read("llm_requests")
    if run_id:
        frame = frame.filter(pl.col("run_id") == run_id)
    keys = ["purpose", "mode", "candidate", "model", "status", "simulated"]
    summary = (
        frame.group_by(keys)
        .agg(
            pl.len().alias("requests"),
            pl.col("attempts").sum(),
            pl.col("input_tokens").sum(),
            pl.col("output_tokens").sum(),
            pl.col("cache_read_input_tokens").sum().alias("cache_read"),
            pl.col("cost_usd").sum(),
        )
        .sort(keys, nulls_last=True)
    )
    table = Table(*keys, "requests", "attempts", "in", "out", "cache read", "USD", title="llm_requests")
    for row in summary.iter_rows(named=True):
        cells = [str(row[k]) if row[k] is not None else "" for k in keys]
        numbers = [str(row[k]) for k in ("requests", "attempts", "input_tokens", "output_tokens", "cache_read")]
        table.add_row(*cells, *numbers, f"{row['cost_usd']:.4f}")
    out.print(table)
    console.print(f"{frame.height} requests, ${frame['cost_usd'].sum() or 0:.4f} in total")


app.command("simulate-llm")(simulate_llm)
app.command("llm-ledger")(llm_ledger)
