"""Readable diffs of rotted blocks: what was recorded against what today's
stores render. Text blocks (the system prompt, a document) diff line by line;
JSON blocks (params, tools, model) diff as indented, key-sorted JSON."""

from __future__ import annotations

import difflib
import json
from typing import Any


def block_lines(value: Any) -> list[str]:
    """A block as lines: text as it is, anything else as indented JSON."""
    if value is None:
        return []
    if isinstance(value, str):
        return value.splitlines()
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def block_diff(block: str, recorded: Any, rerendered: Any, context: int = 2) -> str:
    """A unified diff of one block; says so when one side does not exist."""
    lines = difflib.unified_diff(
        block_lines(recorded),
        block_lines(rerendered),
        fromfile=f"{block} (recorded)" if recorded is not None else f"{block} (not recorded)",
        tofile=f"{block} (re-rendered today)" if rerendered is not None else f"{block} (gone today)",
        n=context,
        lineterm="",
    )
    return "\n".join(lines)
