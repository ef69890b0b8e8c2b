"""`tracelake migrate`: rewrite a warehouse written by an older tracelake in the current
table layout (``record.schema.LAYOUT``), table by table, and verify it row for row.

Each table is rewritten in **one commit**: its rows are read as their writer built them
(``layout1.read``), one partition at a time, cast to the declared schema and streamed
into an overwrite that also sets the table's partitioning and the column comments,
including the layout marker on its key column. So a table is either all in the old
layout or all in the new one, whatever kills the process: a second run skips the tables
already rewritten and redoes the others (the files a killed write left behind go at the
next vacuum). Then the table is checked against the version it replaced, read through
time travel: the same number of rows, the same keys, and every column the same except
``record_sha256``.

``record_sha256`` shorter than 64 digits (layout 1 kept 8 or 16) is computed again over
the row as migrated: the first re-ingest of the same record then rewrites its row once.
Block hashes and the re-rendered hashes of rotted calls keep the digits layout 1 stored
(the rest was never written); a side-table row whose call was deleted before the
migration keeps the 16-digit prefix it was stored under and is counted as ``orphans``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import polars as pl
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from pipelines.delta import TABLE_CONFIGURATION, WRITER_PROPERTIES, Tables, layout_of, to_arrow
from pipelines.migration import layout1
from pipelines.record.canonical import record_sha256
from pipelines.record.rows import BOOKKEEPING
from pipelines.record.schema import KEYS, LAYOUT, PARTITIONS, TABLES

log = logging.getLogger(__name__)
# side tables first: a rewrite reads `calls` and `spans` in either layout
ORDER = [name for name in TABLES if name not in ("spans", "calls")] + ["spans", "calls"]
DIGEST_CHARS = 64
# a side-table call id that is a 16-digit prefix after reading: its call was deleted
ORPHANS = {"rot_checks": "call_id", "retention": "call_id", "redaction_audit": "call_id"}


@dataclass
class TableReport:
    table: str
    status: str  # rewritten | current | absent
    rows: int = 0
    version_before: int | None = None
    version_after: int | None = None
    orphans: int = 0


@dataclass
class MigrationReport:
    tables: list[TableReport] = field(default_factory=list)

    @property
    def rewritten(self) -> list[str]:
        return [t.table for t in self.tables if t.status == "rewritten"]


class MigrationMismatch(RuntimeError):
    """A rewritten table that does not hold what the old one did (names the table and what differs)."""


def stale_tables(warehouse: Tables) -> list[str]:
    """The tables of ``warehouse`` stored in an older layout."""
    stale = []
    for name in TABLES:
        table = warehouse.table(name, any_layout=True)
        if table is not None and layout_of(table, name) != LAYOUT:
            stale.append(name)
    return stale


def migrate(warehouse: Tables, progress: Callable[[TableReport], None] | None = None) -> MigrationReport:
    """Rewrite every table of ``warehouse`` that is in an older layout; describe every table."""
    report = MigrationReport()
    for name in ORDER:
        result = migrate_table(warehouse, name)
        report.tables.append(result)
        if progress is not None:
            progress(result)
    return report


def migrate_table(warehouse: Tables, name: str) -> TableReport:
    table = warehouse.table(name, any_layout=True)
    if table is None:
        return TableReport(name, "absent")
    if layout_of(table, name) == LAYOUT:
        warehouse.describe(name)
        return TableReport(name, "current", version_before=table.version(), version_after=table.version())
    before = table.version()
    # statistics on every column from the rewrite on (the configuration survives the overwrite)
    table.alter.set_table_properties(TABLE_CONFIGURATION)
    old = DeltaTable(warehouse.table_uri(name), version=table.version(), storage_options=warehouse.storage_options())
    schema = TABLES[name]
    # the scans are made here: delta-rs cannot be called from inside the write that reads the stream
    frames = _migrated(warehouse, name, old)
    batches = (batch for frame in frames for batch in frame.to_batches())
    write_deltalake(
        warehouse.table(name, any_layout=True),
        pa.RecordBatchReader.from_batches(schema, batches),
        mode="overwrite",
        schema_mode="overwrite",
        partition_by=list(PARTITIONS[name]) or None,
        writer_properties=WRITER_PROPERTIES,
    )
    warehouse.describe(name)
    rows, orphans = verify(warehouse, name, old)
    after = warehouse.version(name)
    log.info("%s: %d rows rewritten in layout %d (version %s -> %s)", name, rows, LAYOUT, before, after)
    return TableReport(name, "rewritten", rows, before, after, orphans)


def _read_old(warehouse: Tables, name: str, old: DeltaTable) -> pl.LazyFrame:
    """The rows of layout-1 ``old`` as their writer built them."""

    def stored(other: str) -> pl.LazyFrame | None:
        table = warehouse.table(other, any_layout=True)
        return None if table is None else pl.scan_delta(table)

    return layout1.read(name, pl.scan_delta(old), stored)


def _partitions(old: DeltaTable, name: str) -> list[pl.Expr | None]:
    """One filter per stored value of the table's first partition column (as stored now:
    a layout-1 table may be partitioned otherwise); one None for an unpartitioned table."""
    columns = list(old.metadata().partition_columns)
    if not columns:
        return [None]
    values = pl.scan_delta(old).select(columns[0]).unique().collect()[columns[0]].sort().to_list()
    return [pl.col(columns[0]) == v if v is not None else pl.col(columns[0]).is_null() for v in values]


def _migrated(warehouse: Tables, name: str, old: DeltaTable) -> Iterator[pa.Table]:
    """The table's rows in the current layout, a partition at a time (scans opened now)."""
    view = _read_old(warehouse, name, old)
    return (
        converted(name, (view if where is None else view.filter(where)).collect()) for where in _partitions(old, name)
    )


def converted(name: str, rows: pl.DataFrame) -> pa.Table:
    """Rows read from layout 1 as the current layout stores them."""
    if name == "redaction_audit":
        # the key is the span redacted (a call's is its call id); call_id only for calls
        rows = rows.with_columns(
            span_key=pl.col("call_id"),
            call_id=pl.when(pl.col("source_table") == "spans").then(None).otherwise(pl.col("call_id")),
        )
    if name == "replay_summary" and "model_basis" not in rows.columns:
        # written before replays moved retired models to a substitute: every group ran on its recorded model
        rows = rows.with_columns(model_basis=pl.lit("recorded_model"))
    data = to_arrow(name, rows)
    if "record_sha256" in data.schema.names:
        data = _full_digests(data)
    return data


def _full_digests(data: pa.Table) -> pa.Table:
    """``record_sha256`` computed again where layout 1 kept only its first digits."""
    digests = data["record_sha256"].to_pylist()
    if all(d is not None and len(d) == DIGEST_CHARS for d in digests):
        return data
    rows = data.to_pylist()
    fixed = [
        d if d is not None and len(d) == DIGEST_CHARS else record_sha256(row, BOOKKEEPING)
        for d, row in zip(digests, rows, strict=True)
    ]
    at = data.schema.names.index("record_sha256")
    return data.set_column(at, data.schema.field("record_sha256"), pa.array(fixed, pa.string()))


def verify(warehouse: Tables, name: str, old: DeltaTable) -> tuple[int, int]:
    """Compare the rewritten table with the rows ``old`` held: counts, keys, and every
    column but ``record_sha256``. Returns (rows, orphans); raises ``MigrationMismatch``."""
    expected = pl.from_arrow(pa.concat_tables([TABLES[name].empty_table(), *_migrated(warehouse, name, old)]))
    stored = pl.read_delta(warehouse.table_uri(name), storage_options=warehouse.storage_options() or None)
    if expected.height != stored.height:
        raise MigrationMismatch(f"{name}: {stored.height} rows after the rewrite, {expected.height} before")
    keys = list(KEYS[name])
    if stored.select(keys).is_duplicated().any() or stored.select(keys).null_count().sum_horizontal().item():
        raise MigrationMismatch(f"{name}: the rewritten table has null or repeated keys ({', '.join(keys)})")
    columns = [c for c in TABLES[name].names if c != "record_sha256"]
    # nested types compare through their JSON text (maps come back from Delta as lists of structs)
    left = _comparable(expected.select(columns)).sort(keys)
    right = _comparable(stored.select(columns)).sort(keys)
    if not left.equals(right):
        differing = [c for c in columns if not left[c].equals(right[c])]
        raise MigrationMismatch(f"{name}: rows differ after the rewrite in {', '.join(differing[:5])}")
    orphans = 0
    if name in ORPHANS:
        orphans = stored.filter(pl.col(ORPHANS[name]).str.len_chars() < DIGEST_CHARS).height
    return stored.height, orphans


def _comparable(frame: pl.DataFrame) -> pl.DataFrame:
    nested = [c for c, t in frame.schema.items() if isinstance(t, pl.List | pl.Struct | pl.Array)]
    return frame.with_columns(pl.struct(c).struct.json_encode().alias(c) for c in nested)
