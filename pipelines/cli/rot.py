"""`tracelake rot TRACE_OR_CALL_ID`: re-render a call (or every call of a trace)
from today's stores now, print the verdict and, for what rotted, a diff of each
moved block.

The check runs live (it does not read `rot_checks`), with the same stores,
keys and code the nightly asset uses: ``grouped.check_frame`` gives the verdicts;
the values of the blocks that moved (for the diffs) come from ``Checker.check``
on those calls alone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import typer
from rich.console import Console, Group
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from pipelines.cli.app import app

if TYPE_CHECKING:
    from pipelines.rot.check import RotCheck

STYLES = {"verified": "green", "rotted": "red", "impure": "yellow", "unverifiable": "magenta"}


def render_check(check: RotCheck) -> Panel:
    """One call's verdict, with a diff per moved block (a rich renderable)."""
    from pipelines.rot.check import VERIFIED
    from pipelines.rot.diff import block_diff

    style = STYLES.get(check.status, "white")
    head = Text.assemble((check.status.upper(), f"bold {style}"))
    if check.components:
        head.append("  " + ", ".join(check.components))
    if check.missing:
        head.append("  missing: " + ", ".join(check.missing))
    facts = [
        ("call", check.call_id),
        ("trace", check.trace_id),
        ("route", check.service),
        ("template", f"{check.template_id} {check.template_version}" if check.template_id else None),
        ("index", check.index_snapshot),
        ("model", f"{check.model_alias} -> {check.model_snapshot}" if check.model_alias else check.model_snapshot),
        ("basis", check.basis),
        ("replay", check.replay_fidelity),
        ("recorded sha256", check.recorded_sha256),
        ("re-rendered", check.rerendered_sha256),
    ]
    body: list = [head, Text("\n".join(f"{k:>16}  {v}" for k, v in facts if v), style="dim")]
    body += [Text(f"  - {line}") for line in check.detail]
    if check.status != VERIFIED:
        for block in check.rotted_blocks:
            diff = block_diff(block, check.recorded_blocks.get(block), check.rerendered_blocks.get(block))
            if diff:
                body.append(Syntax(diff, "diff", theme="ansi_dark", word_wrap=True))
    return Panel(Group(*body), title=check.call_id[:16], border_style=style, expand=True)


class CheckUnavailable(Exception):
    """Why a live rot check could not run (a store file, a missing key): the message says what to fix."""


def check_now(settings, warehouse, calls) -> list[RotCheck]:
    """The verdict on each row of ``calls`` (`rot/check.py`'s CALL_COLUMNS) against today's stores,
    now, with the recorded and re-rendered values of what moved (for diffs; never stored)."""
    import polars as pl

    from pipelines.redact.keys import KeyRing, MissingKey
    from pipelines.resources.stores import load_ingredients
    from pipelines.rot.check import VERIFIED, Checker, RotCheck
    from pipelines.rot.grouped import check_frame
    from pipelines.rot.redaction import RedactionView, audits_from_rows
    from pipelines.rot.store_files import StoreFileError

    stores = settings.ingredient_stores()
    versions = calls.select("template_id", "template_version").drop_nulls().unique().iter_rows()
    try:
        ingredients = load_ingredients(
            stores["template_store"],
            stores["document_store"],
            stores["model_alias_store"],
            stores["params_store"],
            versions,
        )
        keys = KeyRing.from_env()
    except (StoreFileError, MissingKey) as e:
        raise CheckUnavailable(str(e)) from None
    audit = warehouse.read("redaction_audit", pl.col("call_id").is_in(calls["call_id"].implode()))
    view = RedactionView(audits_from_rows(audit.iter_rows(named=True)), keys=keys)
    clock = datetime.now(UTC)
    verdicts = check_frame(Checker(ingredients, clock, redaction=view), calls)
    with_blocks = Checker(ingredients, clock, redaction=view, keep_blocks=True)
    checks = []
    for call, row in zip(calls.iter_rows(named=True), verdicts.iter_rows(named=True), strict=True):
        check = RotCheck(**row)
        if check.status != VERIFIED and check.rotted_blocks:
            # the same verdict, with the recorded and re-rendered values of what moved
            kept = with_blocks.check(call)
            check.recorded_blocks, check.rerendered_blocks = kept.recorded_blocks, kept.rerendered_blocks
        checks.append(check)
    return checks


def rot_command(
    target: str = typer.Argument(..., metavar="TRACE_OR_CALL_ID", help="A call id, or a trace id (all its calls)"),
    day: str = typer.Option(None, "--date", help="The calls' day, YYYY-MM-DD: reads one partition instead of all"),
) -> None:
    """Re-render a call's ingredients today and say whether its request still reproduces."""
    import polars as pl

    from pipelines.rot.check import CALL_COLUMNS, ROTTED, VERIFIED
    from pipelines.settings import Settings

    out = Console()
    settings = Settings.from_env()
    warehouse = settings.warehouse()
    where = (pl.col("call_id") == target) | (pl.col("trace_id") == target)
    if day:
        try:
            where = where & (pl.col("occurred_date") == datetime.strptime(day, "%Y-%m-%d").date())
        except ValueError:
            raise typer.BadParameter("expected YYYY-MM-DD", param_hint="--date") from None
    calls = warehouse.read("calls", where, list(CALL_COLUMNS)).sort("call_id")
    if calls.is_empty():
        typer.echo(
            f"error: no call or trace {target!r} in {warehouse.uri}; check the id, or ingest its day first "
            "(tracelake run ingest --date YYYY-MM-DD)",
            err=True,
        )
        raise typer.Exit(1)
    try:
        checks = check_now(settings, warehouse, calls)
    except CheckUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    for check in checks:
        out.print(render_check(check))
    if len(checks) > 1:
        rotted = sum(c.status == ROTTED for c in checks)
        out.print(f"{len(checks)} calls: {rotted} rotted, {sum(c.status == VERIFIED for c in checks)} verified")


app.command("rot")(rot_command)
