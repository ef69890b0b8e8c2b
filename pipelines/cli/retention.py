"""`tracelake forget --user-id ID`: erase one user from every table.

It never prints the user id: the output names tables
and counts, and the erasure id to quote in the ticket.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pipelines.cli.app import app, console


def read_key(path: Path) -> bytes:
    """The erasure key: the bytes of a file (a mounted secret), without surrounding whitespace."""
    try:
        key = path.read_bytes().strip()
    except OSError as e:
        raise typer.BadParameter(f"cannot read the erasure key file {path} ({e.strerror})") from None
    if not key:
        raise typer.BadParameter(f"the erasure key file {path} is empty")
    return key


def forget(
    user_id: Annotated[
        str,
        typer.Option(
            "--user-id",
            help="The user's id as the application sent it (an email or phone id is mapped to its stored pseudonym)",
        ),
    ],
    requested_by: Annotated[
        str, typer.Option("--requested-by", help="Who asked: a ticket or request reference (stored; no personal data)")
    ],
    key_file: Annotated[
        Path,
        typer.Option(
            "--key-file", help="File holding the erasure key (the same key for every erasure; keep it secret)"
        ),
    ],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation")] = False,
) -> None:
    """Delete every row of one user in every table, vacuum the files, and log the erasure (no personal data)."""
    from pipelines.redact.keys import MissingKey
    from pipelines.retention.erasure import ErasureError, forget_user
    from pipelines.settings import Settings

    key = read_key(key_file)
    warehouse = Settings.from_env().warehouse()
    if not yes:
        typer.confirm(f"Erase every row of this user from {warehouse.uri}? This cannot be undone", abort=True)
    try:
        report = forget_user(warehouse, user_id, key=key, requested_by=requested_by, now=datetime.now(UTC))
    except (ErasureError, MissingKey) as e:
        raise typer.BadParameter(str(e)) from None
    table = Table("table", "rows deleted")
    for name, rows in sorted(report.rows_deleted.items()):
        table.add_row(name, str(rows))
    console.print(table)
    console.print(
        f"erasure {report.erasure_id[:16]}: {report.total_rows_deleted} rows deleted, "
        f"{report.files_removed} files removed, logged in erasure_log"
    )
    if report.rows_remaining:
        console.print(
            f"[red]{report.rows_remaining} rows of this user are still readable[/] (written while the erasure ran?); "
            "run the same command again"
        )
        raise typer.Exit(1)
    console.print("The raw source is not tracelake's to change: erase this user's raw objects there too.")


app.command("forget")(forget)
