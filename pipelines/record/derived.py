"""Columns a table's rows get from their other columns when they are written: the one
place each such rule lives (``Warehouse`` applies it to every write).

- ``occurred_hour`` (`calls`, `spans`): the UTC hour of ``occurred_at``, their second
  partition column, so a write of a few hours reads and rewrites those hours only.
- ``rot_set_key`` (`calls`): the rot check's ingredient-set key (``record.set_key``),
  from the values as stored (after redaction), so it always describes its row.
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.record.set_key import KEY_COLUMN, KEY_COLUMNS, set_keys

HOUR = "occurred_hour"


def with_derived_columns(name: str, data: pa.Table) -> pa.Table:
    """``data`` (of ``name``'s schema) with its derived columns computed."""
    names = data.schema.names
    if HOUR in names:
        hours = pc.cast(pc.hour(data["occurred_at"]), pa.int32())
        data = data.set_column(names.index(HOUR), data.schema.field(HOUR), hours)
    if name == "calls" and data.num_rows:
        keys = set_keys(pl.from_arrow(data.select(list(KEY_COLUMNS))))
        data = data.set_column(
            names.index(KEY_COLUMN), data.schema.field(KEY_COLUMN), keys.to_arrow().cast(pa.string())
        )
    return data
