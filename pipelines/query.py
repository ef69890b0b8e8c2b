"""SQL over the warehouse tables (``tracelake sql``): only those tables, only as many
rows as will be shown, and values as inert text.

- polars SQL also has table functions (``read_csv('/any/path')``,
  ``read_parquet``, ``read_ipc``, ``read_json``/``read_ndjson``) that would
  read any file the process can: a query calling one is refused before it runs.
- The row limit is applied to the lazy query (``head``), so polars pushes it
  into scans and joins: a cross join does not build millions of rows to print five.
- Data is text, not terminal input: control characters (ESC sequences, C1,
  bidirectional overrides) are shown escaped (``\\x1b``) and the output is
  never interpreted as rich markup.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

# what polars SQL offers to read files; anything shaped read_x(...) or scan_x(...) is refused
_FILE_FUNCTION = re.compile(r"\b((?:read|scan)_[a-z0-9_]+)\s*\(", re.IGNORECASE)
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)
_STRINGS = re.compile(r"'(?:[^']|'')*'")
_QUOTED = re.compile(r'"((?:[^"]|"")*)"')
# C0 but tab and newline, DEL, C1, and the bidirectional controls that reorder what a terminal shows
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class QueryRefused(ValueError):
    """A query tracelake will not run; the message says why and what to do instead."""


@dataclass(frozen=True)
class QueryResult:
    frame: pl.DataFrame  # at most ``limit`` rows
    truncated: bool  # more rows exist beyond ``limit``


def check_query(query: str) -> None:
    """Refuse a query that reads anything but the registered tables."""
    visible = _COMMENTS.sub(" ", query)
    visible = _STRINGS.sub("''", visible)
    visible = _QUOTED.sub(lambda m: m.group(1), visible)
    found = _FILE_FUNCTION.search(visible)
    if found:
        raise QueryRefused(
            f"{found.group(1)}(...) reads files outside the warehouse; tracelake sql reads only the warehouse "
            "tables (tracelake tables lists them): query those by name"
        )


def run_query(query: str, tables: Mapping[str, pl.LazyFrame], limit: int) -> QueryResult:
    """Run ``query`` over ``tables`` (name -> lazy frame), computing at most ``limit`` + 1 rows."""
    if limit < 1:
        raise QueryRefused(f"--limit must be at least 1 (got {limit})")
    check_query(query)
    context = pl.SQLContext(dict(tables), eager=False)
    frame = context.execute(query).head(limit + 1).collect()
    return QueryResult(frame.head(limit), frame.height > limit)


def inert(text: str) -> str:
    """``text`` with every control character shown as an escape: safe to print to a terminal."""
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
