"""How tracelake writes and reads its Delta tables, with no framework around it: the
files' properties, the table configuration, rows cast to a table's declared schema, the
layout marker, and the keyed replace every write is (``upsert`` within a ``Scope``).
``pipelines.resources.warehouse.Warehouse`` runs these against a folder or S3 prefix.

The table written is the table read. Every table is declared in ``record/schema.py`` and
stored exactly so: rows cast to the declared Arrow schema (never inferred), every key in
full, every column meaning what its comment says. What a reader never sees is all that is
physical: zstd, dictionary and DELTA_LENGTH_BYTE_ARRAY encodings, and statistics on every
column (so any engine's file pruning is right: a pyarrow dataset prunes a file for a
column that has no statistics).

Every write is a **keyed replace**: the keys and digests of the partitions a write touches
are read at the table's current version and matched with the new rows (upsert by key, a
stored row replaced only when its ``record_sha256`` changed; deletes by a predicate). The
rows that change go in with one overwrite whose predicate names those partitions and the
changed keys (``Replaced.predicate``): delta-rs rewrites only the files that hold such a
key, keeping their other rows, so a write's memory and I/O follow the rows it changes,
not the day it lands in (a shard of a day writes its own rows, whatever its neighbours
stored). A write that changes nothing commits nothing. Another writer that first commits
a file that could hold one of those keys (by its statistics) or into a partition this
write found empty makes the commit fail, and the write is done again on the new version:
two runs writing one day never both insert a row (``tests/production/test_concurrent_writers.py``).
delta-rs's own MERGE and DELETE are not used: the files they write carry ``string_view``
in their Arrow schema, which pyarrow's filters cannot compare (delta-io/delta-rs#4579;
``tests/tables/test_conformance.py`` checks every stored file).
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Protocol, TypeVar

import polars as pl
import pyarrow as pa
from deltalake import ColumnProperties, CommitProperties, DeltaTable, Transaction, WriterProperties

from pipelines.record.derived import with_derived_columns
from pipelines.record.rows import ARROW_ERRORS, misfits
from pipelines.record.schema import KEYS, LAYOUT_KEY, TABLES

log = logging.getLogger(__name__)
T = TypeVar("T")
# Delta's default log retention, restored after ``Warehouse.vacuum`` drops the history
DEFAULT_LOG_RETENTION = "interval 30 days"
# What delta-rs's S3 client says when a request failed in a way another attempt may not:
# object_store retries reads, but not a commit's conditional PUT whose connection dropped.
TRANSIENT_S3 = ("error sending request", "connection", "timed out", "status code: 5", "SlowDown")
# Statistics for every column in the Delta log (the default is the first 32 columns only).
TABLE_CONFIGURATION = {"delta.dataSkippingNumIndexedCols": "-1"}
# Hex digests and ids (random digits, mostly one value a row) are written as
# DELTA_LENGTH_BYTE_ARRAY without a dictionary: PLAIN puts a 4-byte length before every
# value, which zstd cannot take out from between random digits. Top-level columns only
# (delta-rs names a column's properties by one path element).
HEX_DIGESTS = (
    "call_id", "span_key", "record_sha256", "rendered_request_sha256", "request_sha256", "response_id",
    "provider_request_id", "recorded_sha256", "rerendered_sha256", "span_id", "quarantine_id", "trace_id",
    "parent_span_id", "request_key", "replay_id", "finding_id", "event_key", "violation_id",
)  # fmt: skip
# String statistics keep 64 characters: a 64-digit id is pruned by its exact value, and a long
# text's min and max stay short (a truncated max is rounded up, so it still bounds the column).
STATISTICS_LENGTH = 64


def writer_properties(compression: str = "ZSTD", level: int | None = 3) -> WriterProperties:
    """The properties every tracelake file is written with, under a codec and level."""
    hex_digest = ColumnProperties(
        statistics_enabled="CHUNK", dictionary_enabled=False, encoding="DELTA_LENGTH_BYTE_ARRAY"
    )
    return WriterProperties(
        compression=compression,
        compression_level=level,
        statistics_truncate_length=STATISTICS_LENGTH,
        default_column_properties=ColumnProperties(statistics_enabled="CHUNK"),
        column_properties=dict.fromkeys(HEX_DIGESTS, hex_digest),
    )


WRITER_PROPERTIES = writer_properties()
# Files that compaction writes, off the ingest path: level 6 stores `calls` in ~6% fewer
# bytes than level 3 for a third more CPU in the write (bench/storage.py --codecs).
COMPACTED_PROPERTIES = writer_properties(level=6)


class Tables(Protocol):
    """What the core needs of a warehouse to maintain or migrate its tables
    (``pipelines.resources.warehouse.Warehouse`` is one)."""

    def table(self, name: str, *, any_layout: bool = False) -> DeltaTable | None: ...
    def table_uri(self, name: str) -> str: ...
    def storage_options(self) -> dict[str, str]: ...
    def describe(self, name: str) -> None: ...
    def version(self, name: str) -> int | None: ...


def is_transient(error: BaseException) -> bool:
    """An S3 error worth another attempt: every write here is idempotent (a partition
    replace with a change guard), so redoing one whose commit did land changes nothing."""
    return isinstance(error, OSError) and any(marker in str(error) for marker in TRANSIENT_S3)


@dataclass(frozen=True)
class MergeResult:
    table: str
    version: int | None
    rows_in: int
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    committed: bool = False


class RowsDoNotFit(ValueError):
    """Rows that do not convert to a table's schema. Names the column, never the value."""


class OldLayout(RuntimeError):
    """A table written by an older tracelake, whose stored form readers would misread."""


def to_arrow(name: str, rows: Sequence[dict[str, Any]] | pa.Table | pl.DataFrame, derive: bool = True) -> pa.Table:
    """Rows as an Arrow table with exactly the declared schema of ``name``, derived columns
    computed (``derive=False``: rows read back from the table, which have them)."""
    schema = TABLES[name]
    if isinstance(rows, pl.DataFrame):
        rows = rows.to_arrow()
    if isinstance(rows, pa.Table):
        # polars writes large types and loses map types; a stored table may lack a column added since
        missing = [f for f in schema if f.name not in rows.schema.names]
        for f in missing:
            rows = rows.append_column(f.name, pa.nulls(rows.num_rows, f.type))
        rows = rows.select(schema.names).cast(schema)
        return with_derived_columns(name, rows) if derive else rows
    rows = list(rows)
    try:
        data = pa.Table.from_pylist(rows, schema=schema)
    except ARROW_ERRORS:
        # pyarrow's message quotes the value (it may be PII): name the row and column instead
        bad = misfits(rows, schema)
        where = ", ".join(f"row {i} column {column}" for i, column in list(bad.items())[:3]) or "a row"
        raise RowsDoNotFit(f"{name}: {where} does not fit the table's schema; the value is not shown") from None
    return with_derived_columns(name, data)


def check_keys(name: str, data: pa.Table) -> None:
    """Every key column non-null and every key once: a table's key is its promise."""
    keys = list(KEYS[name])
    frame = pl.from_arrow(data.select(keys))
    nulls = [k for k in keys if frame[k].null_count()]
    if nulls:
        raise RowsDoNotFit(f"{name}: {frame[nulls[0]].null_count()} rows have no {nulls[0]} (part of the key)")
    if frame.is_duplicated().any():
        raise RowsDoNotFit(f"{name}: {int(frame.is_duplicated().sum())} rows share a key ({', '.join(keys)})")


def one_chunk(data: pa.Table) -> pa.Table:
    """``data`` in one chunk per column: the Parquet writer splits every batch by partition."""
    return data.combine_chunks() if data.num_columns and data.column(0).num_chunks > 1 else data


def sql_literal(value: Any) -> str:
    if isinstance(value, date):
        return f"'{value.isoformat()}'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


def in_list(column: str, values: Iterable[Any]) -> str:
    return f"{column} IN ({', '.join(sql_literal(v) for v in sorted(set(values)))})"


# A commit whose PUT landed but whose response was lost looks failed to the writer (its
# retried PUT finds the version taken). Every write carries a Delta transaction identifier
# (app id of this process, increasing version), so the next attempt sees its own commit
# in the log and reports it instead of writing again.
WRITER_ID = f"tracelake-{uuid.uuid4().hex}"
_TRANSACTIONS = itertools.count(time.time_ns())
TXN_KEY = "tracelake.txn"


def new_transaction() -> int:
    """A transaction id for one write, the same on every attempt of it (a retry sees it landed)."""
    return next(_TRANSACTIONS)


COUNTS = ("inserted", "updated", "deleted")


def commit_properties(txn: int, counts: dict[str, int]) -> CommitProperties:
    """The commit's transaction id, and what it changed (read back by ``landed``)."""
    metadata = {TXN_KEY: str(txn), **{f"tracelake.{k}": str(counts.get(k, 0)) for k in COUNTS}}
    return CommitProperties(app_transactions=[Transaction(app_id=WRITER_ID, version=txn)], custom_metadata=metadata)


def landed_result(name: str, table: DeltaTable, txn: int, rows_in: int) -> MergeResult | None:
    """The MergeResult of transaction ``txn`` if it is already in the table's log."""
    if (table.transaction_version(WRITER_ID) or -1) < txn:
        return None
    commit = next((c for c in table.history(50) if str(c.get(TXN_KEY)) == str(txn)), {})
    log.info("%s: commit %s landed though its response was lost; not committing again", name, commit.get("version"))
    counts = {k: int(commit.get(f"tracelake.{k}", 0)) for k in COUNTS}
    return MergeResult(name, commit.get("version", table.version()), rows_in, **counts, committed=True)


def partition_columns(table: DeltaTable) -> list[str]:
    return list(table.metadata().partition_columns)


def layout_of(table: DeltaTable, name: str) -> int:
    """The layout a stored table was written in (``schema.LAYOUT``); 1 for tables written
    before layouts were recorded."""
    key = KEYS[name][0]
    field = next((f for f in table.schema().fields if f.name == key), None)
    return int((field.metadata or {}).get(LAYOUT_KEY, 1)) if field is not None else 1


@dataclass(frozen=True)
class Scope:
    """The partitions a write reads and replaces: a SQL predicate for the overwrite and
    the same as a polars expression for the read (None: the whole table)."""

    sql: str
    expr: pl.Expr | None


def scope_of(columns: Sequence[str], touched: pl.DataFrame) -> Scope:
    """The partitions named by ``touched`` (a frame of partition values, one row per
    partition, over a prefix of ``columns``)."""
    if not columns or touched.width == 0:
        return Scope("true", None)
    if touched.height == 0:
        return Scope("false", pl.lit(False))
    first, rest = columns[0], [c for c in columns[1:] if c in touched.columns]
    sql, exprs = [], []
    for (value,), group in touched.group_by(first, maintain_order=True):
        clause, expr = _equal(first, [value])
        for column in rest:
            more, more_expr = _equal(column, group[column].unique().to_list())
            clause, expr = f"{clause} AND {more}", expr & more_expr
        sql.append(f"({clause})")
        exprs.append(expr)
    return Scope(" OR ".join(sql), pl.any_horizontal(exprs))


def _equal(column: str, values: list[Any]) -> tuple[str, pl.Expr]:
    """``column`` is one of ``values`` (None among them: or null), as SQL and as a polars expression."""
    present = [v for v in values if v is not None]
    sql, expr = [], []
    if present:
        sql.append(in_list(column, present))
        expr.append(pl.col(column).is_in(present))
    if len(present) < len(values):
        sql.append(f"{column} IS NULL")
        expr.append(pl.col(column).is_null())
    return ("(" + " OR ".join(sql) + ")", pl.any_horizontal(expr))


def _digest(frame: pl.DataFrame) -> pl.Series:
    """What tells a changed row from an unchanged one: ``record_sha256`` where the table
    has it (it leaves out bookkeeping such as ingested_at), else the whole row's hash."""
    if "record_sha256" in frame.columns:
        return frame["record_sha256"]
    return frame.hash_rows().cast(pl.String)


@dataclass(frozen=True)
class Replaced:
    """What a write changes in its scope: the new rows it writes, the stored keys it takes
    out (replaced or deleted), and the counts."""

    rows: pa.Table
    removed: pl.DataFrame
    inserted: int = 0
    updated: int = 0
    deleted: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.inserted or self.updated or self.deleted)


def index_columns(name: str, replace: pl.Expr | None = None) -> list[str] | None:
    """The stored columns ``upsert`` needs: the key, the digest, and what ``replace`` reads
    (None: every column, for a table whose digest is the whole row)."""
    if "record_sha256" not in TABLES[name].names:
        return None
    wanted = [*KEYS[name], "record_sha256", *(replace.meta.root_names() if replace is not None else [])]
    return list(dict.fromkeys(wanted))


def upsert(
    name: str,
    stored: pl.DataFrame,
    data: pa.Table,
    *,
    replace: pl.Expr | None = None,
    only_existing: bool = False,
    only_new: bool = False,
) -> Replaced:
    """``data`` matched by key with ``stored`` (the scope's rows, at least its
    ``index_columns``): a new key is inserted, a stored row is replaced when its digest
    differs (with ``only_existing``: only where its digest is still the one ``data``
    carries, and nothing is inserted; with ``only_new``: a stored key is left as it is),
    and a stored row that ``data`` does not bring is deleted where it matches ``replace``."""
    keys = list(KEYS[name])
    new = pl.from_arrow(data)
    old = stored.select(*keys, stored_digest=_digest(stored), is_stored=pl.lit(True))
    matched = new.select(*keys, new_digest=_digest(new)).join(old, on=keys, how="left", maintain_order="left")
    is_stored = matched["is_stored"].fill_null(False)
    same = matched["new_digest"].eq_missing(matched["stored_digest"]) & is_stored
    if only_existing:
        take = is_stored & same
    elif only_new:
        take = ~is_stored
    else:
        take = ~(is_stored & same)
    inserted = 0 if only_existing else int((~is_stored).sum())
    updated = int(take.sum()) - inserted
    removed = matched.filter(take & is_stored).select(keys)
    deleted = 0
    if replace is not None:
        gone = stored.filter(replace.fill_null(False)).join(new.select(keys), on=keys, how="anti").select(keys)
        deleted = gone.height
        removed = pl.concat([removed, gone])
    return Replaced(data.filter(take.to_arrow()), removed, inserted, updated, deleted)


def keyed_predicate(name: str, scope: Scope, replaced: Replaced) -> tuple[str, pl.Expr | None]:
    """The overwrite predicate of a write into a scope that holds rows: the scope and the
    first key column among the values the write changes (as SQL, and as a polars
    expression for the stored rows it selects; None when the key is one column, so the
    predicate selects exactly the rows taken out)."""
    keys = list(KEYS[name])
    first = keys[0]
    values = pl.concat([replaced.removed[first], pl.from_arrow(replaced.rows.column(first))]).unique()
    sql = f"({scope.sql}) AND {in_list(first, values.to_list())}"
    if len(keys) == 1:
        return sql, None
    expr = pl.col(first).is_in(values.implode())
    return sql, expr if scope.expr is None else scope.expr & expr
