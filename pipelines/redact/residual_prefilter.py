"""Which rows of a stored table the residual-PII scan must walk, found in polars.

``residual.residual_counts`` walks a row leaf by leaf in Python only when one
of the text values it would visit can hold a match: here every string a walk
could reach (the field map's columns and struct fields, through lists) is
searched at once, in Rust, with ``residual.RAW_GATE``, which is true wherever
``residual.may_match_any_reading`` is. A row none of whose strings the gate
finds anything in counts zero for every pattern without being converted to
Python. What the walk could count but is no string (an integer, a value of a
type the field map does not expect) makes its row a candidate: only strings
are judged here.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import polars as pl

_ROW = "__residual_row"
# the least a slice searched in a thread of its own holds (less: the thread costs more than it saves;
# a day's `calls` text is about 120 MB, its `spans` attributes about 6 MB)
MIN_PART_BYTES = 16_000_000


def candidate_rows(frame: pl.DataFrame, spec: Mapping[str, Any] | None, columns: list[str], gate: str) -> np.ndarray:
    """A boolean per row of ``frame``: True where the walk over ``columns`` may
    count something. ``spec``: the table's field map (``row_fields.FIELDS``), whose
    TEXT/JSON names mark the strings a walk visits; None: every string of the
    columns (``JsonWalker.walk`` of the whole value)."""
    found = np.zeros(frame.height, dtype=bool)
    for marked in candidate_cells(frame, spec, columns, gate).values():
        found |= marked
    return found


def candidate_cells(
    frame: pl.DataFrame, spec: Mapping[str, Any] | None, columns: list[str], gate: str, parts: int | None = None
) -> dict[str, np.ndarray]:
    """``candidate_rows`` column by column: for each of ``columns`` with a candidate,
    a boolean per row, True where the walk over that column's value may count
    something. A walk visits each column of a row on its own, so a row's counts
    are those of walking only its marked columns.

    The rows are searched in ``parts`` slices at once, one thread each (default: one
    per thread of polars' pool, each slice ``MIN_PART_BYTES`` or more): one search
    runs on one core, and polars releases the GIL while it runs."""
    if frame.height == 0:
        return {}
    if parts is None:
        text_bytes = frame.select(columns).estimated_size()
        parts = max(1, min(pl.thread_pool_size(), int(text_bytes // MIN_PART_BYTES), frame.height))
    if parts == 1:
        return _cells(frame, spec, columns, gate)
    rows_a_slice = -(-frame.height // parts)
    slices = [frame.slice(start, rows_a_slice) for start in range(0, frame.height, rows_a_slice)]
    with ThreadPoolExecutor(len(slices)) as pool:
        found = list(pool.map(lambda part: _cells(part, spec, columns, gate), slices))
    cells = {}
    for column in columns:
        if any(column in part for part in found):
            cells[column] = np.concatenate(
                [
                    part.get(column, np.zeros(piece.height, dtype=bool))
                    for part, piece in zip(found, slices, strict=True)
                ]
            )
    return cells


def _cells(frame: pl.DataFrame, spec: Mapping[str, Any] | None, columns: list[str], gate: str) -> dict[str, np.ndarray]:
    """``candidate_cells`` of one slice, in this thread."""
    indexed = frame.select(columns).with_row_index(_ROW)
    cells = {}
    for column in columns:
        found = np.zeros(frame.height, dtype=bool)
        for rows, hit in _hits(indexed.select(_ROW, column), column, None if spec is None else spec[column], gate):
            found[rows.filter(hit).to_numpy()] = True
        if found.any():
            cells[column] = found
    return cells


def _hits(frame: pl.DataFrame, column: str, spec: Any, gate: str):
    """(row index, may-count flag) series pairs for the values under ``column``."""
    dtype = frame.schema[column]
    if isinstance(dtype, pl.List | pl.Array):
        # one row per element; the row index goes with it (an empty or null list: a null)
        yield from _hits(frame.explode(column), column, spec, gate)
    elif isinstance(dtype, pl.Struct):
        names = [f.name for f in dtype.fields]
        if spec is not None and not isinstance(spec, Mapping):  # a text column holding a struct
            yield frame[_ROW], frame[column].is_not_null()
            return
        wanted = [n for n in names if spec is None or n in spec]
        if not wanted:
            return
        fields = frame.select(_ROW, *(pl.col(column).struct.field(n).alias(f"{column}.{n}") for n in wanted))
        for name in wanted:
            yield from _hits(fields, f"{column}.{name}", None if spec is None else spec[name], gate)
    elif dtype == pl.String and not isinstance(spec, Mapping):
        yield frame[_ROW], frame[column].str.contains(gate).fill_null(False)
    elif dtype == pl.Null:
        return
    else:  # no string: judged by the walk (an integer may be a CPF)
        yield frame[_ROW], frame[column].is_not_null()
