"""The `tracelake` Typer app and its two consoles; every command module registers on ``app``."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import typer
from rich.console import Console
from rich.text import Text

from pipelines.printable import inert

app = typer.Typer(help="Keep, clean and replay production LLM traces.", no_args_is_help=True, add_completion=False)
# progress, errors and summaries go to stderr; results (tables, reports) to stdout
console = Console(stderr=True)
out = Console()


def shown(value: object, style: str = "") -> Text:
    """``value`` from data (a file, a table, an argument) as rich Text: printed as it is, never read
    as markup (``[/]`` is text), control characters escaped (``\\x1b``)."""
    return Text(inert(str(value)), style=style)


def said(label: str, style: str, value: object) -> Text:
    """A styled ``label``, then ``value`` from data ``shown``: ``said("rejected", "red", error)``."""
    return Text.assemble(Text(label, style=style), " ", shown(value))


# INFO, not DEBUG: the assets' progress lines without every engine event
QUIET = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
# The UI lists a job's runs by job name AND this tag (repository@code location,
# pyproject's [tool.dagster] code_location_name): without it, a CLI run shows
# on the Runs page but not under its job.
CODE_LOCATION = "tracelake"
RUN_TAGS = {".dagster/repository": f"__repository__@{CODE_LOCATION}"}


def yesterday() -> date:
    """Yesterday, UTC: the day a command means when it is given none."""
    return datetime.now(UTC).date() - timedelta(days=1)


def days_between(first: date, last: date) -> list[date]:
    """Every day from ``first`` to ``last``, both included (``--date`` and ``--to``)."""
    if last < first:
        raise typer.BadParameter(f"--to {last} is before --date {first}")
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]
