"""Delta tables: explicit schemas, idempotent merges with conflict retry, maintenance.

Every write goes through ``Warehouse.merge``: rows are cast to the table's
schema from ``record/schema.py`` (never inferred), merged by the table's key,
and a matched row is rewritten only when its ``record_sha256`` changed, so a
re-run that brings nothing new makes no commit at all. What a table leaves out
because another column already says it (``record/stored.py``) is left out on
every write and filled back in on every ``scan`` and ``read``.
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
import pyarrow.compute as pc
from deltalake import ColumnProperties, CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.table import TableMerger
from pydantic import Field

from pipelines.record.rows import ARROW_ERRORS, misfits
from pipelines.record.schema import PARTITIONS, TABLES
from pipelines.record.stored import (
    HOUR,
    LAYOUT_COLUMNS,
    change_digest,
    from_stored,
    key_predicate,
    to_stored,
    with_layout,
)
from pipelines.resources.object_store import read_again

log = logging.getLogger(__name__)
T = TypeVar("T")
# Delta's default log retention, restored after ``Warehouse.vacuum`` drops the history
DEFAULT_LOG_RETENTION = "interval 30 days"
# What delta-rs's S3 client says when a request failed in a way another attempt may not:
# object_store retries reads, but not a commit's conditional PUT whose connection dropped.
TRANSIENT_S3 = ("error sending request", "connection", "timed out", "status code: 5", "SlowDown")
# Digests and ids that are unique per row gain nothing from a dictionary (it only adds an
# index per value).
UNIQUE_PER_ROW = (
    "call_id", "span_key", "record_sha256", "rendered_request_sha256", "request_sha256", "response_id",
    "provider_request_id", "recorded_sha256", "rerendered_sha256", "span_id", "quarantine_id",
)  # fmt: skip
# Min/max statistics only where a filter can skip a file by them: times, dates, numbers, a
# few low-cardinality labels and what `tracelake maintain` z-orders by (maintenance.ZORDER;
# call_id has none since before). Other ids, digests and text (random or wide values) prune
# nothing, and their statistics cost a min and a max per column and file in the Parquet
# footer, the page index and the Delta log (calls: 26 -> 16 footer bytes a call, bench/storage.py).
LABELS_WITH_STATISTICS = (
    "service", "status", "kind", "tier", "source_format", "environment", "source_table", "trace_id", "request_model",
)  # fmt: skip


def _with_statistics(field: pa.Field) -> bool:
    kind = field.type
    temporal_or_number = pa.types.is_temporal(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind)
    return temporal_or_number or pa.types.is_boolean(kind) or field.name in LABELS_WITH_STATISTICS


# Hex digests and ids (random digits, mostly one value a row) stored as DELTA_LENGTH_BYTE_ARRAY:
# PLAIN writes a 4-byte length before every value, which zstd cannot take out from between
# random digits; this encoding writes the lengths apart (delta-packed: nearly nothing, they are
# all the same) and the digits back to back. No dictionary either: trace ids repeat only a few
# times a file. Text is not encoded so: DLBA made `calls.system_text` 16 -> 18 bytes a call (its
# values repeat, which a dictionary or zstd's window finds better between lengths).
# bench/storage.py's day, bytes a call: see README "Storage". Top-level columns only: delta-rs
# names a column's properties by one path element, so a nested leaf (block_hashes.sha256)
# keeps the defaults.
HEX_DIGESTS = (
    *UNIQUE_PER_ROW, "trace_id", "parent_span_id",
)  # fmt: skip
HEX_ENCODING = "DELTA_LENGTH_BYTE_ARRAY"


def _column_properties(name: str, with_statistics: bool) -> ColumnProperties:
    hex_digest = name in HEX_DIGESTS
    return ColumnProperties(
        statistics_enabled="CHUNK" if with_statistics else None,
        dictionary_enabled=False if hex_digest or name in UNIQUE_PER_ROW else None,
        encoding=HEX_ENCODING if hex_digest else None,
    )


COLUMN_PROPERTIES = {
    field.name: _column_properties(field.name, _with_statistics(field) and field.name not in UNIQUE_PER_ROW)
    for schema in TABLES.values()
    for field in schema
    if (_with_statistics(field) and field.name not in UNIQUE_PER_ROW)
    or field.name in UNIQUE_PER_ROW
    or field.name in HEX_DIGESTS
}


def writer_properties(compression: str = "ZSTD", level: int | None = 3) -> WriterProperties:
    """The column properties every tracelake file has, under a codec and level."""
    return WriterProperties(
        compression=compression,
        compression_level=level,
        default_column_properties=ColumnProperties(statistics_enabled="NONE"),
        column_properties=COLUMN_PROPERTIES,
    )


# Every Parquet file tracelake writes. Most stored bytes are hex ids and digests (~4 bits of
# entropy per character), which snappy cannot shrink and zstd's entropy coder halves; level 3
# (zstd's default) is within a few percent of 6 and 9 at a fraction of their write time
# (bench/storage.py --codecs prints the comparison).
WRITER_PROPERTIES = writer_properties()
# Files that compaction writes, off the ingest path: level 6 stores `calls` in 6% fewer bytes
# than level 3 (358 -> 338 a call on bench/storage.py's day) for a third more CPU in the write
# (0.95 -> 1.26 CPU-s for that day's `calls`), which the ingest path does not pay; level 9 is
# no smaller than 6 (bench/storage.py --codecs).
COMPACTED_PROPERTIES = writer_properties(level=6)


def is_transient(error: BaseException) -> bool:
    """An S3 error worth another attempt: every write here is idempotent (keyed merges
    with a hash guard), so redoing one whose commit did land changes nothing."""
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


def to_arrow(name: str, rows: Sequence[dict[str, Any]] | pa.Table | pl.DataFrame) -> pa.Table:
    """Rows as an Arrow table with exactly the declared schema of ``name``."""
    schema = TABLES[name]
    if isinstance(rows, pl.DataFrame):
        rows = rows.to_arrow()
    if isinstance(rows, pa.Table):
        # polars writes large types and loses map types: cast back to the declared schema
        return rows.select(schema.names).cast(schema)
    rows = list(rows)
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except ARROW_ERRORS:
        # pyarrow's message quotes the value (it may be PII): name the row and column instead
        bad = misfits(rows, schema)
        where = ", ".join(f"row {i} column {column}" for i, column in list(bad.items())[:3]) or "a row"
        raise RowsDoNotFit(f"{name}: {where} does not fit the table's schema; the value is not shown") from None


def one_chunk(data: pa.Table) -> pa.Table:
    """``data`` in one chunk per column for a write: an ingest's rows come as one record batch per
    source object (523 on bench/ingest.py's day), and the Parquet writer splits every batch by
    partition (day and hour), so it encodes 523 x 24 slices instead of 24. Copying them together
    first costs less than it saves (bench/ingest.py's `calls` write: 1.09-1.19 -> 0.97-0.99 CPU-s)."""
    return data.combine_chunks() if data.num_columns and data.column(0).num_chunks > 1 else data


def sql_literal(value: Any) -> str:
    if isinstance(value, date):
        return f"'{value.isoformat()}'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


def in_list(column: str, values: Iterable[Any]) -> str:
    return f"{column} IN ({', '.join(sql_literal(v) for v in sorted(set(values)))})"


# A commit whose PUT landed but whose response was lost looks failed to the
# writer (its retried PUT finds the version taken). Every merge carries a Delta
# transaction identifier (app id of this process, increasing version), so the
# next attempt sees its own commit in the log and reports it instead of merging again.
WRITER_ID = f"tracelake-{uuid.uuid4().hex}"
_TRANSACTIONS = itertools.count(time.time_ns())
TXN_KEY = "tracelake.txn"


def _commit_properties(txn: int) -> CommitProperties:
    return CommitProperties(
        app_transactions=[Transaction(app_id=WRITER_ID, version=txn)], custom_metadata={TXN_KEY: str(txn)}
    )


def _landed(name: str, table: DeltaTable, txn: int, rows_in: int) -> MergeResult | None:
    """The MergeResult of transaction ``txn`` if it is already in the table's log."""
    if (table.transaction_version(WRITER_ID) or -1) < txn:
        return None
    commit = next((c for c in table.history(50) if str(c.get(TXN_KEY)) == str(txn)), {})
    metrics = commit.get("operationMetrics") or {}
    log.info("%s: commit %s landed though its response was lost; not committing again", name, commit.get("version"))
    return MergeResult(
        name,
        commit.get("version", table.version()),
        rows_in,
        inserted=int(metrics.get("num_target_rows_inserted", 0)),
        updated=int(metrics.get("num_target_rows_updated", 0)),
        deleted=int(metrics.get("num_target_rows_deleted", 0)),
        committed=True,
    )


def partition_columns(table: DeltaTable) -> list[str]:
    """How the table's files are actually laid out (an older table may predate ``PARTITIONS``)."""
    return list(table.metadata().partition_columns)


def narrowing(table: DeltaTable, data: pa.Table, partitions: Iterable[Any] | None) -> str:
    """The literal predicate (`` AND ...``) that confines a merge to the files its rows can
    match: the days ``partitions`` and, where the table is laid out by hour, the hours the
    rows fall in. delta-rs prunes files only by literals: ``t.occurred_hour = s.occurred_hour``
    scans every file (field-notes.md)."""
    columns = partition_columns(table)
    if partitions is None or not columns:
        return ""
    predicate = " AND " + in_list(f"t.{columns[0]}", partitions)
    hours = pc.unique(data[HOUR]).to_pylist() if HOUR in columns and HOUR in data.schema.names else [None]
    if hours and None not in hours:
        # a call's hour is that of its occurred_at, which never changes: it is stored in no other hour
        predicate += " AND " + in_list(f"t.{HOUR}", hours)
    return predicate


def by_stored_hour(table: DeltaTable, data: pa.Table) -> list[pa.Table]:
    """``data`` in groups merged one after another, so that no merge reads much more than
    ``MERGE_READ_ROWS`` stored rows, or one hour's when an hour holds more. A shard brings
    a few rows of hours other than its own (sessions across an hour, objects whose key has
    no hour); merged at once, they would make it read all of those hours. Rows into hours
    that hold nothing go with the first group."""
    columns = partition_columns(table)
    if HOUR not in columns or HOUR not in data.schema.names or data.num_rows == 0:
        return [data]
    day, hour = pl.col(columns[0]), pl.col(HOUR)
    stored = (
        pl.from_arrow(pa.table(table.get_add_actions(flatten=True)))
        .select(day=pl.col(f"partition.{columns[0]}"), hour=pl.col(f"partition.{HOUR}"), rows="num_records")
        .group_by("day", "hour")
        .agg(pl.col("rows").sum())
    )
    touched = (
        pl.from_arrow(data.select([columns[0], HOUR]))
        .select(day=day, hour=hour)
        .unique()
        .join(stored, on=["day", "hour"], how="inner")
        .sort("day", "hour")
    )
    if touched["rows"].sum() <= MERGE_READ_ROWS:
        return [data]
    group, groups, held = 0, {}, 0
    for at_day, at_hour, rows in touched.iter_rows():
        if held and held + rows > MERGE_READ_ROWS:
            group, held = group + 1, 0
        groups[(at_day, at_hour)], held = group, held + rows
    keys = pl.DataFrame(
        {"day": [d for d, _ in groups], "hour": [h for _, h in groups], "group": list(groups.values())},
        schema={"day": pl.Date, "hour": pl.Int32, "group": pl.Int64},
    )
    index = (
        pl.from_arrow(data.select([columns[0], HOUR]))
        .select(day=day, hour=hour)
        .join(keys, on=["day", "hour"], how="left", maintain_order="left")["group"]
        .fill_null(0)
        .to_arrow()
    )
    return [data.filter(pc.equal(index, i)) for i in range(group + 1)]


def combined(name: str, results: Sequence[MergeResult]) -> MergeResult:
    """One result for the merges of one write's groups (``by_stored_hour``)."""
    return MergeResult(
        name,
        results[-1].version,
        sum(r.rows_in for r in results),
        inserted=sum(r.inserted for r in results),
        updated=sum(r.updated for r in results),
        deleted=sum(r.deleted for r in results),
        committed=any(r.committed for r in results),
    )


def fit_layout(name: str, table: DeltaTable, data: pa.Table) -> pa.Table:
    """``data`` for the table as it is laid out: a table written before ``PARTITIONS``
    gained a column gets rows without it (it keeps working, its merges read whole days)
    until ``Warehouse.relayout`` rewrites it."""
    stale = [c for c in LAYOUT_COLUMNS.get(name, ()) if c in data.schema.names and c not in partition_columns(table)]
    if not stale:
        return data
    if name not in _WARNED_LAYOUT:
        _WARNED_LAYOUT.add(name)
        log.warning(
            "%s is laid out by %s, not %s: every merge reads the whole day; "
            "run `tracelake relayout %s` while no ingest runs to rewrite it in the new layout",
            name, partition_columns(table), list(PARTITIONS[name]), name,
        )  # fmt: skip
    return data.drop_columns(stale)


_WARNED_LAYOUT: set[str] = set()
# Stored rows one merge may read before a write is split by hour (``by_stored_hour``):
# delta-rs holds every row it reads in a merge, ~8 KB a call (README, "How tracelake scales"),
# so about 40 MB; small tables still get one merge (and one commit) a write.
MERGE_READ_ROWS = 5_000


def _merger(table: DeltaTable, data: pa.Table, predicate: str, **options: Any) -> TableMerger:
    """A merge of ``data`` (alias ``s``) into ``table`` (alias ``t``), written as every tracelake file is."""
    # merge_schema: a column added to schema.py (top-level or nested) evolves old tables in place
    return table.merge(
        data,
        predicate=predicate,
        source_alias="s",
        target_alias="t",
        merge_schema=True,
        writer_properties=WRITER_PROPERTIES,
        **options,
    )


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

    def table(self, name: str) -> DeltaTable | None:
        try:
            return DeltaTable(self.table_uri(name), storage_options=self.storage_options())
        except TableNotFoundError:
            return None

    def version(self, name: str) -> int | None:
        table = self.table(name)
        return None if table is None else table.version()

    def scan(self, name: str, *, keep_stored_call_id: bool = False) -> pl.LazyFrame:
        """A lazy polars frame over the table, with the columns storage leaves
        out filled in; an empty frame of the right schema when the table does not exist yet.
        ``keep_stored_call_id``: also the call id as the files hold it (record/stored.py
        ``STORED_CALL_ID``), for a delete by key."""
        table = self.table(name)
        stored = pl.from_arrow(TABLES[name].empty_table()).lazy() if table is None else pl.scan_delta(table)
        # as the core built the rows: what storage leaves out comes back (record/stored.py)
        return from_stored(name, stored, self._scan_stored, keep_stored_call_id)

    def _scan_stored(self, name: str) -> pl.LazyFrame | None:
        table = self.table(name)
        return None if table is None else pl.scan_delta(table)

    def read(self, name: str, where: pl.Expr | None = None, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """Rows of a table. The object store under delta-rs and polars retries
        reset and truncated responses itself (tests/ingest/test_faults.py); what
        still fails is read again whole, then reported with the table's URI."""

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
        replace: str | None = None,
        append_when_empty: bool = False,
        call_rows: pa.Table | None = None,
    ) -> MergeResult:
        """Upsert ``rows`` by the table's key.

        ``partitions`` narrows the match to those partition values (file
        pruning). ``replace`` is a SQL predicate on the target (``t.``) whose
        rows not in ``rows`` are deleted: a changed source object replaces
        what it wrote before. With ``append_when_empty`` rows going into
        partitions that hold nothing yet are appended, not merged: only for a
        caller that is the sole writer of those partitions (two blind appends
        do not conflict, two merges do). ``call_rows``: the `calls` rows ``rows`` were
        built from, already merged by this run; what ``rows`` copy from them is left out
        against these instead of the stored `calls` table (record/stored.py ``to_stored``).
        """
        data = to_stored(name, to_arrow(name, rows), self._scan_stored, call_rows)
        partitions = None if partitions is None else list(partitions)  # used again on every attempt
        if data.num_rows == 0 and replace is None:
            return MergeResult(name, self.version(name), 0)
        for attempt in range(1, self.max_commit_attempts + 1):
            if self.table(name) is not None:
                break
            if data.num_rows == 0:
                return MergeResult(name, None, 0)
            try:
                created = self._create(name, data)
            except OSError as e:
                if not is_transient(e) or attempt == self.max_commit_attempts:
                    raise
                log.info("creating %s failed (%s); trying again", name, type(e).__name__)
                continue
            if created is not None:
                return created
        # rows reaching into several hours already stored: one merge per such hour, so that a
        # run holds one hour of stored rows at a time, not every hour its stray rows fall in
        groups = [data] if replace is not None or partitions is None else by_stored_hour(self.table(name), data)
        results = []
        for group in groups:
            txn = next(_TRANSACTIONS)  # one per merge, the same on every attempt: a retry can see it landed
            results.append(
                self._retrying(
                    name,
                    lambda table, g=group, t=txn: self._merge_into(
                        name, table, g, partitions, replace, t, append_when_empty
                    ),
                )
            )
        return results[0] if len(results) == 1 else combined(name, results)

    def ensure(self, name: str) -> None:
        """Create the table empty when it does not exist yet: it can be queried from the first run."""
        if self.table(name) is None:
            self._create(name, to_stored(name, TABLES[name].empty_table()))

    def _create(self, name: str, data: pa.Table) -> MergeResult | None:
        """Write the first version of a table; None when another writer created it first."""
        try:
            write_deltalake(
                self.table_uri(name),
                one_chunk(data),
                mode="error",
                partition_by=list(PARTITIONS[name]) or None,
                storage_options=self.storage_options(),
                writer_properties=WRITER_PROPERTIES,
            )
        except Exception as e:
            if self.table(name) is None:
                raise
            log.info("table %s appeared while creating it (%s); merging instead", name, type(e).__name__)
            return None
        return MergeResult(name, 0, data.num_rows, inserted=data.num_rows, committed=True)

    def _merge_into(
        self,
        name: str,
        table: DeltaTable,
        data: pa.Table,
        partitions: Iterable[Any] | None,
        replace: str | None,
        txn: int,
        append_when_empty: bool = False,
    ) -> MergeResult:
        landed = _landed(name, table, txn, data.num_rows)
        if landed is not None:
            return landed
        data = fit_layout(name, table, data)
        part_cols = partition_columns(table)
        if append_when_empty and partitions is not None and part_cols and replace is None and data.num_rows:
            partitions = sorted(partitions)
            values = [p.isoformat() if isinstance(p, date) else str(p) for p in partitions]
            where = [(part_cols[0], "in", values)]
            if HOUR in part_cols and HOUR in data.schema.names:
                where.append((HOUR, "in", [str(h) for h in pc.unique(data[HOUR]).to_pylist() if h is not None]))
            if partitions and not table.file_uris(file_pruning_predicate=where):
                # nothing to match in those partitions: an append writes the same rows without the join
                return self._append(name, table, data, txn)
        predicate = key_predicate(name) + narrowing(table, data, partitions)
        before = table.version()
        merger = _merger(table, data, predicate, commit_properties=_commit_properties(txn))
        if "record_sha256" in data.schema.names:
            merger = merger.when_matched_update_all(predicate=f"{change_digest(name, 't')} <> s.record_sha256")
        merger = merger.when_not_matched_insert_all()
        if replace is not None:
            merger = merger.when_not_matched_by_source_delete(predicate=replace)
        metrics = merger.execute()
        after = table.version()
        return MergeResult(
            name,
            after,
            data.num_rows,
            inserted=metrics.get("num_target_rows_inserted", 0),
            updated=metrics.get("num_target_rows_updated", 0),
            deleted=metrics.get("num_target_rows_deleted", 0),
            committed=after != before,
        )

    def _append(self, name: str, table: DeltaTable, data: pa.Table, txn: int) -> MergeResult:
        """The merge of rows into partitions that hold none yet: every row is an
        insert. The transaction id makes a retry whose commit landed see it."""
        write_deltalake(
            table,
            one_chunk(data),
            mode="append",
            partition_by=partition_columns(table) or None,
            schema_mode="merge",
            commit_properties=_commit_properties(txn),
            writer_properties=WRITER_PROPERTIES,
        )
        return MergeResult(name, table.version(), data.num_rows, inserted=data.num_rows, committed=True)

    # Maintenance: the retention sweep and erasure use these to remove bytes, not only rows.

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

    def delete(self, name: str, predicate: str) -> int:
        """Delete the rows matching a SQL ``predicate``; returns how many. The
        files that held them stay on disk until ``vacuum``."""
        metrics = self._retrying(name, lambda table: table.delete(predicate, writer_properties=WRITER_PROPERTIES))
        return 0 if metrics is None else int(metrics.get("num_deleted_rows", 0))

    def rewrite(
        self,
        name: str,
        rows: Sequence[dict[str, Any]] | pa.Table | pl.DataFrame,
        *,
        partitions: Iterable[Any] | None = None,
    ) -> MergeResult:
        """Replace existing rows, matched by key, with new versions of them; never inserts.

        A row is replaced only while its ``record_sha256`` is still the one in
        ``rows``: if a re-ingest changed the row since it was read, the newer
        row wins and is left for the next run.
        """
        data = to_stored(name, to_arrow(name, rows), self._scan_stored)
        if data.num_rows == 0:
            return MergeResult(name, self.version(name), 0)
        partitions = None if partitions is None else list(partitions)  # used again on every attempt
        keys = key_predicate(name)
        guard = f"{change_digest(name, 't')} = s.record_sha256" if "record_sha256" in data.schema.names else None

        def once(table: DeltaTable) -> MergeResult:
            before = table.version()
            fitted = fit_layout(name, table, data)
            predicate = keys + narrowing(table, fitted, partitions)
            metrics = _merger(table, fitted, predicate).when_matched_update_all(predicate=guard).execute()
            after = table.version()
            updated = metrics.get("num_target_rows_updated", 0)
            return MergeResult(name, after, data.num_rows, updated=updated, committed=after != before)

        return self._retrying(name, once) or MergeResult(name, None, data.num_rows)

    def relayout(self, name: str) -> bool:
        """Rewrite a table written before its layout (``PARTITIONS``) changed in the current
        one; False when it is laid out so already (or does not exist). One overwrite commit,
        streamed batch by batch: readers see the old files or the new ones, and time travel
        keeps the old version until a vacuum. Run it while nothing else writes the table: a
        merge that commits meanwhile makes it fail (run it again)."""
        table = self.table(name)
        if table is None or partition_columns(table) == list(PARTITIONS[name]):
            return False
        dataset = table.to_pyarrow_dataset()
        schema = with_layout(name, dataset.schema.empty_table()).schema
        batches = (
            laid_out
            for batch in dataset.to_batches()
            for laid_out in with_layout(name, pa.Table.from_batches([batch], dataset.schema)).to_batches()
        )
        write_deltalake(
            table,
            pa.RecordBatchReader.from_batches(schema, batches),
            mode="overwrite",
            partition_by=list(PARTITIONS[name]) or None,
            schema_mode="overwrite",
            writer_properties=WRITER_PROPERTIES,
        )
        return True

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

        Three steps: every file no longer in the table goes now (a plain
        vacuum with zero retention); files the log never referenced (left by
        failed writes) go too (``full=True``), once older than
        ``orphan_grace_hours``, because a younger one may belong to a writer
        that has not committed yet; and the log history is dropped, because
        old commits keep min/max column statistics and delete predicates,
        which can quote the very values removed. Time travel to earlier
        versions is gone afterwards, as after any vacuum.
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
