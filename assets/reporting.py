"""Metadata every asset reports: row counts, the table version and a preview."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from pipelines.resources.warehouse import MergeResult, Warehouse


def preview(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], limit: int = 5) -> dg.MetadataValue:
    """A small markdown table of chosen columns. Choose ids, counts and
    statuses: text columns belong in the table, not in the UI."""
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


def merge_metadata(result: MergeResult, warehouse: Warehouse) -> dict[str, dg.MetadataValue | int | str | None]:
    return {
        "rows_in": result.rows_in,
        "rows_inserted": result.inserted,
        "rows_updated": result.updated,
        "rows_deleted": result.deleted,
        "committed": dg.MetadataValue.bool(result.committed),
        "table_version": result.version,
        "table_uri": dg.MetadataValue.path(warehouse.table_uri(result.table)),
    }
