"""The `tracelake` Typer app and its two consoles; every command module registers on ``app``."""

from __future__ import annotations

import typer
from rich.console import Console

app = typer.Typer(help="Keep, clean and replay production LLM traces.", no_args_is_help=True, add_completion=False)
# progress, errors and summaries go to stderr; results (tables, reports) to stdout
console = Console(stderr=True)
out = Console()
