"""One day's ingest as a write plan: everything the `raw_traces` asset writes,
computed by one call.

The plan decides which listed objects are new or changed, parses them, joins
their fragments onto the calls already stored, redacts, screens for residual
PII and does the record accounting; the asset only reads (through the
readers it passes in), calls ``plan_day`` and writes ``DayPlan.writes`` in
order. No Dagster and no I/O of its own here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Protocol

import polars as pl
import pyarrow as pa

from pipelines.collector import gc_paused
from pipelines.ingest.objects import (
    IngestBatch,
    SourceObject,
    existing_calls_to_read,
    ingest_objects,
    objects_to_ingest,
    settle_with_existing,
)
from pipelines.record.rows import from_columns
from pipelines.record.schema import TABLES
from pipelines.redact.screen import account, screen_tables


class RowRedactor(Protocol):
    mode: str

    def redact_rows(
        self,
        calls: list[dict[str, Any]],
        spans: list[dict[str, Any]],
        *,
        now: datetime,
    ) -> Any: ...


@dataclass(frozen=True)
class TableWrite:
    """One ``Warehouse.merge``: ``replace`` selects the stored rows of ``partitions`` that
    are deleted unless ``rows`` bring them again (a changed object replaces what its
    previous version wrote)."""

    table: str
    rows: list[dict[str, Any]] | pa.Table
    partitions: set[date] | None = None
    replace: pl.Expr | None = None

    def merge_into(self, warehouse: Any) -> Any:
        """This write, through ``warehouse`` (a ``Warehouse``): its ``MergeResult``."""
        return warehouse.merge(self.table, self.rows, partitions=self.partitions, replace=self.replace)


@dataclass
class DayPlan:
    # in write order; ingest_log last: an object is only marked done once its rows are in
    writes: list[TableWrite]
    batch: IngestBatch
    audit: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    entities: dict[str, int] = field(default_factory=dict)
    # what happened, for the run's log (no record content)
    notes: list[str] = field(default_factory=list)

    def write(self, table: str) -> TableWrite | None:
        return next((w for w in self.writes if w.table == table), None)


def plan_day(
    listed: Sequence[Any],
    seen: Mapping[str, str],
    read_objects: Callable[[list[Any]], Iterable[SourceObject]],
    read_calls: Callable[[list[str], list[date]], list[dict[str, Any]]],
    *,
    day: date,
    run_id: str,
    now: datetime,
    overrides: Mapping[str, str] | None = None,
    redactor: RowRedactor | None = None,
    policy: Any = None,
    patterns: Any = None,
    progress: Callable[[int, int, IngestBatch], None] | None = None,
    redacting: Callable[[], None] | None = None,
    redacted: Callable[[], None] | None = None,
) -> DayPlan:
    """The write plan for ``day``.

    ``listed`` are the source's objects for the day and ``seen`` the etag last
    ingested per key (unchanged objects are skipped). ``read_objects`` reads
    the objects to ingest (lazily, in order), ``read_calls(trace_ids, days)``
    the stored `calls` rows settling needs. With a ``redactor`` the rows are
    redacted and screened with ``policy`` and ``patterns`` before they are
    planned; without one (benchmarks, tests of the load path) they are planned raw.
    ``sole_writer`` says no other run writes the day's partitions at the same
    time (the runs of a sharded day do): then rows going into a day that holds
    none yet are appended rather than merged. ``redacting`` is called as the
    rows go to the redactor, for the caller's own work that can overlap with the
    redactor's workers (the parent mostly waits for them); ``redacted`` once the
    redactor is done with them (its workers can stop while the plan is finished).
    """
    todo, unchanged = objects_to_ingest(listed, seen)
    notes = [f"{day}: {len(listed)} objects listed, {len(todo)} new or changed, {len(unchanged)} unchanged"]
    read: list[SourceObject] = []

    def remembered() -> Iterator[SourceObject]:
        for obj in read_objects(todo):
            read.append(SourceObject(obj.key, obj.uri, obj.etag, obj.size, obj.last_modified))  # no bytes kept
            yield obj

    def report(done: int, batch: IngestBatch) -> None:
        if progress is not None:
            progress(done, len(todo), batch)

    with gc_paused():
        batch = ingest_objects(remembered(), day, run_id, now, overrides, progress=report)

        # Join log events, tools, retrievals and feedback onto the calls already
        # stored (late scores, split exports); the batch itself is assembled.
        trace_ids, days = existing_calls_to_read(batch)
        if trace_ids:
            updated = settle_with_existing(batch, read_calls(sorted(trace_ids), sorted(days)))
            notes.append(f"{updated} stored calls updated; {len(batch.fragments)} fragments found no call")

        audit: list[dict[str, Any]] = []
        held = 0
        if redactor is not None:
            if redacting is not None:
                redacting()
            audit, tables, held = _redact_and_screen(
                batch, redactor, policy, patterns, read, run_id, now, notes, redacted
            )
        else:
            tables = {"calls": batch.arrow("calls"), "spans": batch.arrow("spans"), "quarantine": batch.quarantine}

        # A changed object replaces what its previous version wrote.
        changed = [o.uri for o in read if o.key in seen]
        replace = pl.col("source_uri").is_in(changed) if changed else None
        writes = [
            TableWrite("calls", tables["calls"], batch.dates("calls"), replace),
            TableWrite("spans", tables["spans"], batch.dates("spans"), replace),
        ]
        if redactor is not None:
            writes.append(TableWrite("redaction_audit", tables["redaction_audit"]))
        writes += [
            TableWrite("quarantine", tables["quarantine"]),
            TableWrite("ingest_log", batch.ingest_log),
        ]

    entities: dict[str, int] = {}
    for row in audit:
        for entity, n in (row.get("entity_counts") or {}).items():
            entities[entity] = entities.get(entity, 0) + n
    counts = {
        "records_quarantined_residual_pii": held,
        "objects_listed": len(listed),
        "objects_skipped_unchanged": len(unchanged),
        "objects_ingested": len(todo),
        "records_read": batch.records_read,
        "records_quarantined": batch.records_quarantined,
    }
    return DayPlan(writes, batch, audit, counts, entities, notes)


def _redact_and_screen(
    batch: IngestBatch,
    redactor: RowRedactor,
    policy: Any,
    patterns: Any,
    read: list[SourceObject],
    run_id: str,
    now: datetime,
    notes: list[str],
    redacted_hook: Callable[[], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, pa.Table], int]:
    """Redaction, then the residual-PII screen of the tables about to be written, on the
    batch in place: nothing after this sees raw text. Returns (the audit rows written,
    the tables to write, rows held back)."""
    redacted = redactor.redact_rows(batch.calls, batch.spans, now=now)
    if redacted_hook is not None:
        redacted_hook()
    batch.calls, batch.spans = redacted.calls, redacted.spans
    # the redactor may change rows in place: none of the schema check's conversions is reused
    batch.converted.clear()
    notes.append(f"redaction ({redactor.mode}): " + ", ".join(f"{k} {v}" for k, v in redacted.stats.items()))

    # Residual-PII screen, apart from the redactor: a row that still matches is quarantined by pointer.
    screened = screen_tables(
        {
            "calls": batch.arrow("calls"),
            "spans": batch.arrow("spans"),
            "redaction_audit": _arrow("redaction_audit", redacted.audit),
            "quarantine": _arrow("quarantine", batch.quarantine),
        },
        policy,
        keys_by_uri={o.uri: o.key for o in read},
        run_id=run_id,
        now=now,
        patterns=patterns,
    )
    held = screened.held
    batch.calls = [row for row in batch.calls if row["call_id"] not in held["calls"]]
    batch.spans = [row for row in batch.spans if row["span_key"] not in held["spans"]]
    batch.quarantine = screened.tables["quarantine"].to_pylist()
    batch.ingest_log = account(batch.ingest_log, screened)
    audit = [row for row in redacted.audit if row["span_key"] not in held[row["source_table"]]]
    return audit, screened.tables, len(screened.quarantine)


def _arrow(table: str, rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_batches([from_columns(rows, TABLES[table])], schema=TABLES[table])
