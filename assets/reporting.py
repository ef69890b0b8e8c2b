"""Metadata every asset reports: row counts, the table version and a preview.

``merge_metadata`` is the one place the standard Dagster keys are set:
``dagster/row_count`` is counted in the table (the partition's rows, after
the merge), not from the rows merged, so an idempotent re-run that writes
nothing still shows the table; ``dagster/column_schema`` is the declared
schema, each column with its meaning (pipelines/record/schema.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg
import polars as pl
import pyarrow as pa

from pipelines.record.schema import SPECS
from pipelines.resources.warehouse import MergeResult, Warehouse

# Columns that tie a row to a person (their id, or the id of their call, trace, session or
# event): Dagster's event storage keeps metadata forever, where `tracelake forget` cannot
# reach, so no preview shows them (tests/retention/test_erasure.py searches the instance).
LINKS_TO_A_PERSON = frozenset(
    ("user_id", "session_id", "conversation_id", "trace_id", "call_id", "span_id", "span_key", "event_key",
     "event_id", "bad_call_id", "good_call_id", "replay_id", "finding_id", "violation_id", "response_id",
     # an application's object keys can carry them too (escalations/<trace_id>.json)
     "source_key", "source_uri")
)  # fmt: skip


def preview(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], limit: int = 5) -> dg.MetadataValue:
    """A small markdown table of chosen columns: labels, counts and statuses. Text columns
    belong in the table, not in the UI, and ids that link to a person are refused."""
    linked = sorted(set(columns) & LINKS_TO_A_PERSON)
    if linked:
        raise ValueError(f"a preview cannot show {', '.join(linked)}: Dagster keeps it where erasure cannot reach")
    if not rows:
        return dg.MetadataValue.md("_no rows_")
    header = "| " + " | ".join(columns) + " |"
    rule = "|" + "---|" * len(columns)
    body = ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows[:limit]]
    return dg.MetadataValue.md("\n".join([header, rule, *body]))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def column_schema(table: str) -> dg.TableSchema:
    """The table's declared schema, as Dagster shows it: each column's type and meaning."""
    return dg.TableSchema(
        columns=[dg.TableColumn(c.name, _type(c.type), description=c.meaning) for c in SPECS[table].columns]
    )


def _type(kind: pa.DataType) -> str:
    return str(kind).replace("large_", "")


def merge_metadata(
    result: MergeResult, warehouse: Warehouse, where: pl.Expr | None = None
) -> dict[str, dg.MetadataValue | dg.TableSchema | int | str | None]:
    """What a merge did, and the table as it now is: ``where`` selects the rows the
    asset (partition) owns for ``dagster/row_count``; None counts the whole table."""
    frame = warehouse.scan(result.table)
    if where is not None:
        frame = frame.filter(where)
    return {
        "dagster/row_count": int(frame.select(pl.len()).collect().item()),
        "dagster/column_schema": column_schema(result.table),
        "rows_in": result.rows_in,
        "rows_inserted": result.inserted,
        "rows_updated": result.updated,
        "rows_deleted": result.deleted,
        "committed": dg.MetadataValue.bool(result.committed),
        "table_version": warehouse.version(result.table) if result.version is None else result.version,
        "table_uri": dg.MetadataValue.path(warehouse.table_uri(result.table)),
    }
