"""The `tracelake` Typer app and its two consoles; every command module registers on ``app``."""

from __future__ import annotations

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
