"""Table maintenance: compaction, z-order, a vacuum that keeps time travel, checkpoints.

tracelake's own writes replace whole partitions (one file each), but appends by
other engines leave small files behind, and readers pay for each. Once a day,
for every table:

0. bring the table's description and column comments to what ``record/schema.py``
   says (a commit only when they changed);
1. compact small files (``optimize.compact``, incremental: only partitions
   with more than one small file are rewritten);
2. z-order the partitions of the day just finished on the columns people
   filter by (``ZORDER``), so file statistics prune trace-id lookups and
   service/model filters; skipped when nothing changed the table since that
   partition was last z-ordered, so a re-run makes no commit;
3. vacuum files that left the table more than ``retention_days`` ago, and
   keep the log as long: time travel to any version of the last
   ``retention_days`` still works. (``Warehouse.vacuum``, used by the
   retention sweep and erasure, deliberately drops all history instead:
   privacy needs the bytes gone now);
4. write a checkpoint, so readers replay a short log.

No Dagster here: the maintenance op calls ``maintain`` and reports what it returns.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date
from typing import TypeVar

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from pipelines.delta import COMPACTED_PROPERTIES, Tables
from pipelines.record.schema import PARTITIONS, TABLES

log = logging.getLogger(__name__)
T = TypeVar("T")

# The columns people filter by inside a day: trace/call lookups (debug, erasure), then
# service and model (dashboards, replay selection). Tables not named here are only compacted.
ZORDER: dict[str, tuple[str, ...]] = {
    "calls": ("trace_id", "service", "request_model"),
    "spans": ("trace_id", "kind"),
    "traces": ("trace_id", "service"),
    "redaction_audit": ("call_id",),
    "retention": ("service", "tier"),
    "rot_checks": ("call_id", "status"),
}
# commits that move no rows between files
BOOKKEEPING = {"VACUUM START", "VACUUM END", "SET TBLPROPERTIES", "CREATE CHECKPOINT"}
COMMIT_ATTEMPTS = 8


@dataclass(frozen=True)
class TableFiles:
    """What a version of a table reads: data files and their bytes."""

    files: int
    bytes: int


@dataclass(frozen=True)
class MaintenanceReport:
    table: str
    version_before: int
    version_after: int
    before: TableFiles
    after: TableFiles
    files_compacted: int
    zordered_partitions: tuple[str, ...]
    files_vacuumed: int
    checkpoint_version: int

    @property
    def committed(self) -> bool:
        return self.version_after != self.version_before


def table_files(table: DeltaTable) -> TableFiles:
    actions = table.get_add_actions(flatten=True)
    sizes = actions.column("size_bytes").to_pylist()
    return TableFiles(files=len(sizes), bytes=int(sum(sizes)))


def _on_fresh_table(warehouse: Tables, name: str, action: Callable[[DeltaTable], T]) -> T:
    """``action`` on a freshly loaded table, again when a concurrent writer committed first."""
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        table = warehouse.table(name)
        if table is None:
            raise LookupError(f"table {name} disappeared during maintenance at {warehouse.table_uri(name)}")
        try:
            return action(table)
        except CommitFailedError:
            if attempt == COMMIT_ATTEMPTS:
                raise
            time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def _is_zorder(commit: dict) -> bool:
    return (
        commit.get("operation") == "OPTIMIZE"
        and (commit.get("operationMetrics") or {}).get("plannerStrategy") == "zOrder"
    )


def _zordered_since_last_write(table: DeltaTable, partition: str) -> bool:
    """True when this partition was z-ordered after the last commit that changed data
    (z-orders of other partitions and bookkeeping commits do not count)."""
    for commit in table.history(limit=50):
        if commit.get("operation") in BOOKKEEPING:
            continue
        if _is_zorder(commit):
            if f"'{partition}'" in str((commit.get("operationParameters") or {}).get("predicate", "")):
                return True
            continue
        return False
    return False


def _retention_properties(retention_days: int) -> dict[str, str]:
    window = f"interval {retention_days} days"
    return {"delta.logRetentionDuration": window, "delta.deletedFileRetentionDuration": window}


def maintain(
    warehouse: Tables,
    name: str,
    days: Iterable[date],
    *,
    retention_days: int,
    zorder: bool = True,
) -> MaintenanceReport | None:
    """Compact, z-order ``days``, vacuum past ``retention_days`` and checkpoint ``name``;
    None when the table does not exist yet."""
    if retention_days < 0:
        raise ValueError(f"retention_days must be 0 or more days of time travel to keep, got {retention_days}")
    table = warehouse.table(name)
    if table is None:
        return None
    version_before, before = table.version(), table_files(table)
    # the table's name, description and column comments follow record/schema.py
    warehouse.describe(name)

    metrics = _on_fresh_table(warehouse, name, lambda t: t.optimize.compact(writer_properties=COMPACTED_PROPERTIES))
    compacted = int(metrics.get("numFilesRemoved", 0))

    zordered: list[str] = []
    part_cols = PARTITIONS[name]
    columns = [c for c in ZORDER.get(name, ()) if c in TABLES[name].names] if zorder else []
    if columns and part_cols:
        present = {str(p.get(part_cols[0])) for p in warehouse.table(name).partitions()}
        for day in sorted({d.isoformat() for d in days} & present):
            if _zordered_since_last_write(warehouse.table(name), day):
                continue
            filters = [(part_cols[0], "=", day)]
            _on_fresh_table(
                warehouse,
                name,
                lambda t, f=filters: t.optimize.z_order(
                    columns, partition_filters=f, writer_properties=COMPACTED_PROPERTIES
                ),
            )
            zordered.append(day)

    wanted = _retention_properties(retention_days)
    current = warehouse.table(name).metadata().configuration
    if any(current.get(k) != v for k, v in wanted.items()):
        _on_fresh_table(warehouse, name, lambda t: t.alter.set_table_properties(wanted))
    # removes only files tombstoned more than retention_days ago: every version inside the window stays readable
    removed = _on_fresh_table(
        warehouse,
        name,
        lambda t: t.vacuum(retention_hours=retention_days * 24, enforce_retention_duration=False, dry_run=False),
    )
    table = warehouse.table(name)
    if table.version() != version_before:
        table.create_checkpoint()
    # log entries older than the window go too (never past the newest checkpoint)
    table.cleanup_metadata()
    table = warehouse.table(name)
    log.info("maintained %s: version %d -> %d", name, version_before, table.version())
    return MaintenanceReport(
        table=name,
        version_before=version_before,
        version_after=table.version(),
        before=before,
        after=table_files(table),
        files_compacted=compacted,
        zordered_partitions=tuple(zordered),
        files_vacuumed=len(removed),
        checkpoint_version=table.version(),
    )
