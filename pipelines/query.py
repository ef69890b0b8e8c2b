"""SQL over the warehouse tables (``tracelake sql``), in DuckDB's dialect: only those
tables, only as many rows as will be shown, and values as inert text.

- Each table is registered by name as an Arrow dataset over its Delta files (filters and
  columns are pushed into the scan). Then the connection loses all external access
  (``enable_external_access = false``, and the configuration is locked): no table
  function, ``COPY``, ``ATTACH``, ``INSTALL`` or ``LOAD`` can name a file or a URL, however
  the query is written. That is DuckDB refusing, not a filter on the query's text.
- The row limit is applied to the query's relation, so DuckDB stops once it has the rows:
  a cross join does not build millions of rows to print five.
- Data is text, not terminal input: the command prints values through
  ``pipelines.printable.inert`` and never as rich markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl


class QueryRefused(ValueError):
    """A query tracelake will not run; the message says why and what to do instead."""


@dataclass(frozen=True)
class QueryResult:
    frame: pl.DataFrame  # at most ``limit`` rows
    truncated: bool  # more rows exist beyond ``limit``


def connection(tables: Mapping[str, Any]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that can read ``tables`` (name -> an Arrow dataset,
    table or reader) and nothing else."""
    con = duckdb.connect(":memory:")
    for name, data in tables.items():
        con.register(name, data)
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def run_query(query: str, tables: Mapping[str, Any], limit: int) -> QueryResult:
    """Run ``query`` over ``tables``, computing at most ``limit`` + 1 rows."""
    if limit < 1:
        raise QueryRefused(f"--limit must be at least 1 (got {limit})")
    con = connection(tables)
    try:
        relation = con.sql(query)
        if relation is None:
            raise QueryRefused("only queries that return rows run here (SELECT, WITH, ...): the warehouse is read-only")
        frame = relation.limit(limit + 1).pl()
    except duckdb.PermissionException as e:
        raise QueryRefused(
            f"{e}; tracelake sql reads only the warehouse tables (tracelake tables lists them): query those by name"
        ) from None
    finally:
        con.close()
    return QueryResult(frame.head(limit), frame.height > limit)
