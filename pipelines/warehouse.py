"""The storage interface: a folder or S3 prefix holding one Delta table per tracelake
table, read and written as ``pipelines/delta.py`` says (partition replaces, statistics on
every column, self-describing tables).

``WarehouseOps`` is every operation, on the attributes a warehouse has (``uri``,
``endpoint_url``, ``region``, the AWS keys and the attempts). ``DeltaWarehouse`` is it as a
plain dataclass, for the core and the command line (no framework imported);
``pipelines.resources.warehouse.Warehouse`` is it as a Dagster resource.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, TypeVar

import polars as pl
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from pipelines.delta import (
    COMPACTED_PROPERTIES,
    DEFAULT_LOG_RETENTION,
    TABLE_CONFIGURATION,
    WRITER_PROPERTIES,
    MergeResult,
    OldLayout,
    Replaced,
    Scope,
    check_keys,
    commit_properties,
    is_transient,
    landed_result,
    layout_of,
    new_transaction,
    one_chunk,
    partition_columns,
    scope_of,
    to_arrow,
    upsert,
)
from pipelines.record.schema import LAYOUT, PARTITIONS, SPECS, TABLES
from pipelines.retrying import read_again

log = logging.getLogger(__name__)
T = TypeVar("T")


class WarehouseOps:
    """A warehouse's operations (the attributes come from the class it is mixed into)."""

    uri: str
    endpoint_url: str | None
    region: str | None
    access_key_id: str | None
    secret_access_key: str | None
    max_commit_attempts: int
    max_read_attempts: int

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
        only_new: bool = False,
    ) -> MergeResult:
        """Upsert ``rows`` by the table's key into the partitions they fall in. ``replace``
        (with ``partitions``, values of the table's first partition column) deletes the
        stored rows of those partitions that match it and that ``rows`` do not bring: a
        changed source object, or a stage that recomputes a whole day, replaces what it
        wrote before. ``only_new``: a row whose key is stored is not written (the stored
        row stands, whoever wrote it, even one committed while this write was prepared)."""
        data = to_arrow(name, rows)
        check_keys(name, data)
        # a stage that ran has its table, queryable even when it found nothing to write
        self.ensure(name)
        if data.num_rows == 0 and replace is None:
            return MergeResult(name, self.version(name), 0)
        extra = list(partitions or []) if replace is not None else None
        return self._replace(
            name,
            data,
            extra,
            lambda stored: upsert(name, stored, data, replace=replace, only_new=only_new),
            whole_first_level=extra is not None,
        )

    def rewrite(self, name: str, rows: Sequence[dict[str, Any]] | pa.Table | pl.DataFrame) -> MergeResult:
        """Replace stored rows, matched by key, with new versions of them; never inserts. A
        row is replaced only while its stored ``record_sha256`` is still the one in ``rows``:
        if a re-ingest changed the row since it was read, the newer row wins and is left for
        the next run."""
        data = to_arrow(name, rows)
        check_keys(name, data)
        if data.num_rows == 0 or self.table(name) is None:
            return MergeResult(name, self.version(name), data.num_rows)
        return self._replace(name, data, None, lambda stored: upsert(name, stored, data, only_existing=True))

    def delete(self, name: str, where: pl.Expr) -> int:
        """Delete the rows matching ``where``; returns how many. The files that held them stay
        on disk until ``vacuum``."""

        txn = new_transaction()
        where = where.fill_null(False)  # a row the predicate says nothing of is kept

        def once(table: DeltaTable) -> int:
            done = landed_result(name, table, txn, 0)
            if done is not None:
                return done.deleted
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
        txn = new_transaction()  # one per write, the same on every attempt: a retry can see it landed

        def once(table: DeltaTable) -> MergeResult:
            done = landed_result(name, table, txn, data.num_rows)
            if done is not None:
                return done
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
            commit_properties=commit_properties(txn, counts),
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


@dataclass(frozen=True)
class DeltaWarehouse(WarehouseOps):
    """A warehouse, as a plain value."""

    uri: str
    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    max_commit_attempts: int = 8
    max_read_attempts: int = 3
