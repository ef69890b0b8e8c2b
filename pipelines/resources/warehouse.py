"""Delta tables: the table written is the table read.

Every table is declared in ``record/schema.py`` and stored exactly so: rows cast to the
declared Arrow schema (never inferred), every key in full, every column meaning what its
comment says. What a reader never sees is all that is physical: zstd, dictionary and
DELTA_LENGTH_BYTE_ARRAY encodings, and statistics on every column (so any engine's file
pruning is right: a pyarrow dataset prunes a file for a column that has no statistics).

Every write is a **partition replace**: the rows of the partitions a write touches are
read at the table's current version, combined with the new rows in memory (upsert by key,
a stored row rewritten only when its ``record_sha256`` changed; deletes by a predicate),
and written back with an overwrite whose predicate names exactly those partitions. A
write that changes nothing commits nothing. Another writer that commits into the same
partitions first makes the commit fail, and the write is done again on the new version:
two runs writing one day never both append (``tests/production/test_concurrent_writers.py``).
delta-rs's own MERGE and DELETE are not used: the files they write carry ``string_view``
in their Arrow schema, which pyarrow's filters cannot compare (delta-io/delta-rs#4579;
``tests/ingest/test_table_conformance.py`` checks every stored file).
"""

from __future__ import annotations

import itertools
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, TypeVar

import dagster as dg
import polars as pl
import pyarrow as pa
from deltalake import ColumnProperties, CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from pydantic import Field

from pipelines.record.derived import with_derived_columns
from pipelines.record.rows import ARROW_ERRORS, misfits
from pipelines.record.schema import KEYS, LAYOUT, LAYOUT_KEY, PARTITIONS, SPECS, TABLES
from pipelines.resources.object_store import read_again

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


def _check_keys(name: str, data: pa.Table) -> None:
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


COUNTS = ("inserted", "updated", "deleted")


def _commit_properties(txn: int, counts: dict[str, int]) -> CommitProperties:
    """The commit's transaction id, and what it changed (read back by ``_landed``)."""
    metadata = {TXN_KEY: str(txn), **{f"tracelake.{k}": str(counts.get(k, 0)) for k in COUNTS}}
    return CommitProperties(app_transactions=[Transaction(app_id=WRITER_ID, version=txn)], custom_metadata=metadata)


def _landed(name: str, table: DeltaTable, txn: int, rows_in: int) -> MergeResult | None:
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
    """The new contents of a write's scope, and what changed in it."""

    rows: pa.Table
    inserted: int = 0
    updated: int = 0
    deleted: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.inserted or self.updated or self.deleted)


def upsert(
    name: str,
    stored: pl.DataFrame,
    data: pa.Table,
    *,
    replace: pl.Expr | None = None,
    only_existing: bool = False,
) -> Replaced:
    """``stored`` (the scope's rows) with ``data`` merged in by key: a new key is inserted,
    a stored row is replaced when its digest differs (with ``only_existing``: only where
    its digest is still the one ``data`` carries, and nothing is inserted), and a stored row
    that ``data`` does not bring is deleted where it matches ``replace``."""
    keys = list(KEYS[name])
    new = pl.from_arrow(data)
    old = stored.select(*keys, stored_digest=_digest(stored), is_stored=pl.lit(True))
    matched = new.select(*keys, new_digest=_digest(new)).join(old, on=keys, how="left", maintain_order="left")
    is_stored = matched["is_stored"].fill_null(False)
    same = matched["new_digest"].eq_missing(matched["stored_digest"]) & is_stored
    take = (is_stored & same) if only_existing else ~(is_stored & same)
    inserted = 0 if only_existing else int((~is_stored).sum())
    updated = int(take.sum()) - inserted
    incoming = new.filter(take).select(keys)
    kept = stored.join(incoming, on=keys, how="anti")
    deleted = 0
    if replace is not None:
        gone = kept.filter(replace.fill_null(False)).join(new.select(keys), on=keys, how="anti").select(keys)
        deleted = gone.height
        kept = kept.join(gone, on=keys, how="anti")
    rows = pa.concat_tables([to_arrow(name, kept, derive=False), data.filter(take.to_arrow())])
    return Replaced(rows, inserted, updated, deleted)


class Warehouse(dg.ConfigurableResource):
    """A folder or S3 prefix holding one Delta table per tracelake table."""

    uri: str = Field(description="s3://bucket/prefix or a local folder")
    endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint (AWS_ENDPOINT_URL)")
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    max_commit_attempts: int = 8
    max_read_attempts: int = 3

    def table_uri(self, name: str) -> str:
        return f"{self.uri.rstrip('/')}/{name}"

    def storage_options(self) -> dict[str, str]:
        if not self.uri.startswith("s3://"):
            return {}
        options = {"AWS_REGION": self.region or "us-east-1"}
        if self.endpoint_url:
            options["AWS_ENDPOINT_URL"] = self.endpoint_url
            if self.endpoint_url.startswith("http://"):
                options["AWS_ALLOW_HTTP"] = "true"
        if self.access_key_id:
            options["AWS_ACCESS_KEY_ID"] = self.access_key_id
        if self.secret_access_key:
            options["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key
        return options

    def table(self, name: str, *, any_layout: bool = False) -> DeltaTable | None:
        """The table at its latest version, None when it does not exist yet. A table in an
        older layout raises ``OldLayout`` (``any_layout``: the migration reads it)."""

        def load() -> DeltaTable | None:
            try:
                return DeltaTable(self.table_uri(name), storage_options=self.storage_options())
            except TableNotFoundError:
                return None

        # a truncated or reset listing of the log is read again, as every other read is
        table = read_again(
            load, self.max_read_attempts, (OSError, DeltaError), f"{self.table_uri(name)}: loading failed"
        )
        if table is not None and not any_layout and layout_of(table, name) != LAYOUT:
            raise OldLayout(
                f"{self.table_uri(name)} was written by an older tracelake (table layout {layout_of(table, name)}, "
                f"this one reads {LAYOUT}): run `tracelake migrate` once to rewrite the warehouse; until then "
                "reading it would give wrong answers"
            )
        return table

    def version(self, name: str) -> int | None:
        table = self.table(name)
        return None if table is None else table.version()

    def scan(self, name: str) -> pl.LazyFrame:
        """A lazy polars frame over the table; an empty frame of its schema when it does not exist yet."""
        table = self.table(name)
        return pl.from_arrow(TABLES[name].empty_table()).lazy() if table is None else pl.scan_delta(table)

    def dataset(self, name: str) -> Any:
        """The table as an Arrow dataset (what DuckDB, pandas or Spark-on-Arrow read); an empty
        Arrow table of its schema when it does not exist yet."""
        table = self.table(name)
        return TABLES[name].empty_table() if table is None else table.to_pyarrow_dataset()

    def read(self, name: str, where: pl.Expr | None = None, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """Rows of a table. The object store under delta-rs and polars retries reset and
        truncated responses itself (tests/ingest/test_faults.py); what still fails is read
        again whole, then reported with the table's URI."""

        def once() -> pl.DataFrame:
            frame = self.scan(name)
            if where is not None:
                frame = frame.filter(where)
            if columns is not None:
                frame = frame.select(columns)
            return frame.collect()

        retryable = (OSError, DeltaError, pl.exceptions.ComputeError)
        return read_again(once, self.max_read_attempts, retryable, f"{self.table_uri(name)}: reading failed")

    def merge(
        self,
        name: str,
        rows: Sequence[dict[str, Any]] | pa.Table | pl.DataFrame,
        *,
        partitions: Iterable[Any] | None = None,
        replace: pl.Expr | None = None,
    ) -> MergeResult:
        """Upsert ``rows`` by the table's key into the partitions they fall in. ``replace``
        (with ``partitions``, values of the table's first partition column) deletes the
        stored rows of those partitions that match it and that ``rows`` do not bring: a
        changed source object, or a stage that recomputes a whole day, replaces what it
        wrote before."""
        data = to_arrow(name, rows)
        _check_keys(name, data)
        # a stage that ran has its table, queryable even when it found nothing to write
        self.ensure(name)
        if data.num_rows == 0 and replace is None:
            return MergeResult(name, self.version(name), 0)
        extra = list(partitions or []) if replace is not None else None
        return self._replace(
            name,
            data,
            extra,
            lambda stored: upsert(name, stored, data, replace=replace),
            whole_first_level=extra is not None,
        )

    def rewrite(self, name: str, rows: Sequence[dict[str, Any]] | pa.Table | pl.DataFrame) -> MergeResult:
        """Replace stored rows, matched by key, with new versions of them; never inserts. A
        row is replaced only while its stored ``record_sha256`` is still the one in ``rows``:
        if a re-ingest changed the row since it was read, the newer row wins and is left for
        the next run."""
        data = to_arrow(name, rows)
        _check_keys(name, data)
        if data.num_rows == 0 or self.table(name) is None:
            return MergeResult(name, self.version(name), data.num_rows)
        return self._replace(name, data, None, lambda stored: upsert(name, stored, data, only_existing=True))

    def delete(self, name: str, where: pl.Expr) -> int:
        """Delete the rows matching ``where``; returns how many. The files that held them stay
        on disk until ``vacuum``."""

        txn = next(_TRANSACTIONS)
        where = where.fill_null(False)  # a row the predicate says nothing of is kept

        def once(table: DeltaTable) -> int:
            landed = _landed(name, table, txn, 0)
            if landed is not None:
                return landed.deleted
            columns = partition_columns(table)
            frame = pl.scan_delta(table)
            touched = frame.filter(where).select(columns).unique().collect() if columns else pl.DataFrame()
            if columns and touched.height == 0:
                return 0
            scope = scope_of(columns, touched)
            stored = frame if scope.expr is None else frame.filter(scope.expr)
            stored = stored.collect()
            gone = stored.filter(where).height
            if gone == 0:
                return 0
            remaining = to_arrow(name, stored.filter(~where), derive=False)
            self._overwrite(table, remaining, scope, txn, {"deleted": gone})
            return gone

        return self._retrying(name, once) or 0

    def ensure(self, name: str) -> None:
        """Create the table empty when it does not exist yet: it can be queried from the first
        run. Rows always go in by a partition replace, never with the create: two writers
        that both create a table would otherwise both land their rows (delta-rs retries a
        losing create as an append, which conflicts with nothing)."""
        if self.table(name) is None:
            self._create(name)

    def describe(self, name: str) -> None:
        """Bring the stored table's name, description and column comments to what
        ``record/schema.py`` says (a commit only where they differ)."""
        table = self.table(name)
        if table is None:
            return
        spec, metadata = SPECS[name], table.metadata()
        if metadata.name != name:
            table.alter.set_table_name(name)
        if metadata.description != spec.description:
            table.alter.set_table_description(spec.description)
        stored = {f.name: dict(f.metadata or {}) for f in table.schema().fields}
        for field in TABLES[name]:
            wanted = {k.decode(): v.decode() for k, v in (field.metadata or {}).items()}
            if field.name in stored and stored[field.name] != wanted:
                table.alter.set_column_metadata(field.name, wanted)

    def _create(self, name: str) -> None:
        """Write the first, empty version of a table (another writer may have just done so)."""
        try:
            write_deltalake(
                self.table_uri(name),
                TABLES[name].empty_table(),
                mode="error",
                partition_by=list(PARTITIONS[name]) or None,
                name=name,
                description=SPECS[name].description,
                configuration=TABLE_CONFIGURATION,
                storage_options=self.storage_options(),
                writer_properties=WRITER_PROPERTIES,
            )
        except Exception as e:
            if self.table(name) is None:
                raise
            log.info("table %s appeared while creating it (%s)", name, type(e).__name__)

    def _replace(
        self,
        name: str,
        data: pa.Table,
        partitions: list[Any] | None,
        combine: Callable[[pl.DataFrame], Replaced],
        whole_first_level: bool = False,
    ) -> MergeResult:
        """Read the partitions ``data`` falls in (plus ``partitions`` of the first partition
        column), ``combine`` them with it, and write them back if anything changed."""
        txn = next(_TRANSACTIONS)  # one per write, the same on every attempt: a retry can see it landed

        def once(table: DeltaTable) -> MergeResult:
            landed = _landed(name, table, txn, data.num_rows)
            if landed is not None:
                return landed
            columns = partition_columns(table)
            touched = pl.from_arrow(data.select(columns)).unique() if columns else pl.DataFrame()
            if columns and whole_first_level:
                # whole partitions of the first column: the ones the rows fall in, and ``partitions``
                extra = pl.Series(columns[0], partitions or [], dtype=touched.schema[columns[0]])
                touched = pl.concat([touched[columns[0]], extra]).unique().to_frame()
            scope = scope_of(columns, touched)
            stored = pl.scan_delta(table)
            stored = (stored if scope.expr is None else stored.filter(scope.expr)).collect()
            result = combine(stored)
            if not result.changed:
                return MergeResult(name, table.version(), data.num_rows)
            counts = {"inserted": result.inserted, "updated": result.updated, "deleted": result.deleted}
            version = self._overwrite(table, result.rows, scope, txn, counts)
            return MergeResult(
                name, version, data.num_rows, result.inserted, result.updated, result.deleted, committed=True
            )

        return self._retrying(name, once) or MergeResult(name, None, data.num_rows)

    def _overwrite(self, table: DeltaTable, rows: pa.Table, scope: Scope, txn: int, counts: dict[str, int]) -> int:
        """Replace the rows of ``scope`` with ``rows`` in one commit; the new version."""
        write_deltalake(
            table,
            one_chunk(rows),
            mode="overwrite",
            predicate=scope.sql,
            partition_by=partition_columns(table) or None,
            schema_mode="merge",
            commit_properties=_commit_properties(txn, counts),
            writer_properties=WRITER_PROPERTIES,
        )
        return table.version()

    def _retrying(self, name: str, action: Callable[[DeltaTable], T]) -> T | None:
        """``action`` on a freshly loaded table, again on a commit conflict; None when the table does not exist."""
        for attempt in range(1, self.max_commit_attempts + 1):
            table = self.table(name)
            if table is None:
                return None
            try:
                return action(table)
            except (CommitFailedError, OSError) as e:
                # a dropped connection can hide a commit that landed: the retry then finds its own rows
                if attempt == self.max_commit_attempts or not (isinstance(e, CommitFailedError) or is_transient(e)):
                    raise
                delay = min(2.0, 0.05 * 2**attempt) * (0.5 + random.random())
                log.info("%s on %s (attempt %d); retrying in %.2fs", type(e).__name__, name, attempt, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    # Maintenance: the retention sweep and erasure use these to remove bytes, not only rows.

    def compact(self, name: str, partitions: Iterable[Any] | None = None) -> int:
        """Merge small files (of the given partitions); returns files removed.
        The replaced files stay on disk until ``vacuum``."""
        filters = None
        if partitions is not None and PARTITIONS[name]:
            values = sorted({v.isoformat() if isinstance(v, date) else str(v) for v in partitions})
            if not values:
                return 0
            filters = [(PARTITIONS[name][0], "in", values)]
        metrics = self._retrying(
            name,
            lambda table: table.optimize.compact(partition_filters=filters, writer_properties=COMPACTED_PROPERTIES),
        )
        return 0 if metrics is None else int(metrics.get("numFilesRemoved", 0))

    def vacuum(self, name: str, *, orphan_grace_hours: int = 1) -> int:
        """Really remove what deletes and rewrites left behind; returns files removed.

        Three steps: every file no longer in the table goes now (a plain vacuum with zero
        retention); files the log never referenced (left by failed writes) go too
        (``full=True``), once older than ``orphan_grace_hours``, because a younger one may
        belong to a writer that has not committed yet; and the log history is dropped,
        because old commits keep min/max column statistics and write predicates, which can
        quote the very values removed. Time travel to earlier versions is gone afterwards,
        as after any vacuum.
        """

        def once(table: DeltaTable) -> list[str]:
            removed = table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
            removed += table.vacuum(
                retention_hours=orphan_grace_hours, enforce_retention_duration=False, dry_run=False, full=True
            )
            return removed

        removed = self._retrying(name, once)
        if removed is None:
            return 0
        self._retrying(name, self._drop_history)
        return len({path.rsplit("/", 1)[-1] for path in removed})

    def _drop_history(self, table: DeltaTable) -> None:
        """Checkpoint at the latest version and delete every older log file."""
        previous = table.metadata().configuration.get("delta.logRetentionDuration")
        table.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
        table.create_checkpoint()
        table.cleanup_metadata()
        table.alter.set_table_properties({"delta.logRetentionDuration": previous or DEFAULT_LOG_RETENTION})
