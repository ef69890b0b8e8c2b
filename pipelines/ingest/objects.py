"""The ingest core: source objects in, rows for calls, spans, ingest_log and
quarantine out. No Dagster and no I/O here; the asset reads and writes.

Nothing is lost: every object ends with an ``ingest_log`` row, every record
in it is either in the rows or in ``quarantine``, and
``records_read == records_ingested + records_quarantined`` is checked for
every object before anything is written.

How it is built for speed (pipelines/formats/README.md, Speed): records are
parsed with orjson and their canonical JSON written with it, behind guards that
fall back to the stdlib wherever the two could differ; each row starts as a copy
of its table's all-None row; a day's rows are converted to Arrow once, by the
schema check, and that conversion is what the write uses for every row assembly
did not change (``IngestBatch.arrow``); a request's blocks are hashed from the
request that was serialized; no automatic garbage collection runs while a batch
is built; Arrow allocates from jemalloc. One process: on two shared cores,
spawned workers re-importing the world and shipping rows back cost more CPU than
they save wall time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

import pyarrow as pa

from pipelines.collector import gc_paused
from pipelines.formats import Normalized, Problem, SourceRef, is_line_delimited, normalize_object
from pipelines.formats.assembly import assemble, carry_over, refinalize
from pipelines.formats.base import Fragment
from pipelines.formats.langfuse_export import awaiting_manifest
from pipelines.record.canonical import record_sha256, sha256_hex
from pipelines.record.rows import ARROW_ERRORS, converted, from_columns, misfits
from pipelines.record.schema import TABLES

# Only the ingest_log columns that describe the outcome take part in its
# change guard; run ids and times do not.
LOG_BOOKKEEPING = ("run_id", "ingested_at", "record_sha256")


@dataclass(frozen=True)
class SourceObject:
    """An object to ingest: where it is, its version, and what reading it gave."""

    key: str
    uri: str
    etag: str
    size: int
    last_modified: datetime
    data: bytes | None = None
    read_error: str | None = None


@dataclass
class IngestBatch:
    calls: list[dict[str, Any]] = field(default_factory=list)
    spans: list[dict[str, Any]] = field(default_factory=list)
    ingest_log: list[dict[str, Any]] = field(default_factory=list)
    quarantine: list[dict[str, Any]] = field(default_factory=list)
    # pieces of calls (log events, tools, retrievals, feedback) still to be joined
    fragments: list[Fragment] = field(default_factory=list)
    # The schema check's Arrow conversion of the day's rows (or of each object's,
    # when some value did not fit), kept so the write need not convert them
    # again: table -> [(rows, their record batch)].
    # It holds the rows, so their ids stay unique while it lives.
    converted: dict[str, list[tuple[list[dict[str, Any]], pa.RecordBatch]]] = field(default_factory=dict)
    # ids of converted rows changed after their conversion (assembly joined something onto them)
    touched: set[int] = field(default_factory=set)

    @property
    def records_read(self) -> int:
        return sum(r["records_read"] for r in self.ingest_log)

    @property
    def records_quarantined(self) -> int:
        return sum(r["records_quarantined"] for r in self.ingest_log)

    def dates(self, table: str) -> set[date]:
        return {r["occurred_date"] for r in getattr(self, table) if r.get("occurred_date") is not None}

    def add(self, other: IngestBatch) -> None:
        self.calls += other.calls
        self.spans += other.spans
        self.ingest_log += other.ingest_log
        self.quarantine += other.quarantine
        self.fragments += other.fragments
        for table, pieces in other.converted.items():
            self.converted.setdefault(table, []).extend(pieces)
        self.touched |= other.touched

    def arrow(self, table: str) -> pa.Table:
        """``table``'s rows (calls or spans) as Arrow with the declared schema:
        the record batches of the schema check for rows unchanged since, a
        conversion for the rest (rows assembly changed, rows from elsewhere)."""
        rows = getattr(self, table)
        schema = TABLES[table]
        wanted = {id(r) for r in rows} - self.touched
        pieces, reused = [], set()
        for object_rows, record_batch in self.converted.get(table, ()):
            keep = [i for i, r in enumerate(object_rows) if id(r) in wanted and id(r) not in reused]
            reused.update(id(object_rows[i]) for i in keep)
            if len(keep) == len(object_rows):
                pieces.append(record_batch)
            elif keep:
                pieces.append(record_batch.take(pa.array(keep, pa.int64())))
        rest = [r for r in rows if id(r) not in reused]
        if rest:
            try:
                pieces.append(from_columns(rest, schema))
            except ARROW_ERRORS:
                # pyarrow's message quotes the value (it may be PII): name the row and column instead
                bad = misfits(rest, schema)
                where = ", ".join(f"row {i} column {column}" for i, column in list(bad.items())[:3]) or "a row"
                raise ValueError(f"{table}: {where} does not fit the table's schema; the value is not shown") from None
        return pa.Table.from_batches(pieces, schema=schema)


def objects_to_ingest(listed: Iterable[Any], seen: Mapping[str, str]) -> tuple[list[Any], list[Any]]:
    """Split listed objects into (new or changed, unchanged) by the etag last ingested per key."""
    listed = list(listed)
    # a Langfuse export file is read only once its run's manifest exists
    waiting = awaiting_manifest(info.key for info in listed)
    todo, unchanged = [], []
    for info in listed:
        if info.key in waiting:
            continue
        (unchanged if seen.get(info.key) == info.etag else todo).append(info)
    return todo, unchanged


def _quarantine_row(obj: SourceObject, problem: Problem, fmt: str | None, run_id: str, now: datetime) -> dict:
    return {
        "quarantine_id": sha256_hex(f"{obj.key}|{obj.etag}|{problem.line}|{problem.error_class}"),
        "source_key": obj.key,
        "source_uri": obj.uri,
        "etag": obj.etag,
        "line": problem.line,
        "byte_offset": problem.byte_offset,
        "scope": problem.scope,
        "source_format": fmt,
        "error_class": problem.error_class,
        "message": problem.message,
        "run_id": run_id,
        "ingested_at": now,
        "ingested_date": now.date(),
    }


def _normalize_truncated(
    obj: SourceObject, source: SourceRef, overrides: Mapping[str, str] | None
) -> tuple[str | None, Normalized]:
    """A line-delimited object whose compressed stream broke off: the complete
    lines before the break are ingested, the line cut by the break is
    quarantined, and the object is marked corrupt. Nothing vanishes."""
    data = obj.data or b""
    complete, _, tail = data.rpartition(b"\n")
    fmt, result = normalize_object(complete + b"\n", source, overrides) if complete else (None, Normalized())
    result.problems.append(Problem("corrupt_object", f"{obj.read_error}; the records before the break are ingested"))
    if tail.strip():
        line = complete.count(b"\n") + 2 if complete else 1
        problem = Problem("corrupt_object", "the stream ends inside this record", line, len(complete) + 1)
        result.problems.append(problem)
        result.records_read += 1
    return fmt, result


def _quarantine_misfits(result: Normalized) -> dict[str, pa.RecordBatch]:
    """Check every row against its table's Arrow schema before any batch is
    converted: a record with a value that does not fit (a string where a
    number belongs) is quarantined by line, with all its rows, instead of
    failing the conversion of the whole day. Returns the rows that stay, as
    Arrow (the check is the conversion)."""
    bad: dict[int | None, str] = {}
    unplaced: dict[str, set[int]] = {"calls": set(), "spans": set()}
    batches: dict[str, pa.RecordBatch] = {}
    for table, rows in (("calls", result.calls), ("spans", result.spans)):
        record_batch, misfit = converted(rows, TABLES[table])
        if record_batch is not None:
            batches[table] = record_batch
        for i, column in misfit.items():
            line = rows[i].get("source_line")
            bad.setdefault(line, f"{table}.{column}")
            if line is None:
                unplaced[table].add(i)  # a row no line can name: drop it alone
    if not bad:
        return batches
    for line, column in bad.items():
        message = f"a value does not fit column {column}; check that field's type at the source"
        result.problems.append(Problem("wrong_type", message, line))

    def keep(table: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            r
            for i, r in enumerate(rows)
            if i not in unplaced[table] and (r.get("source_line") is None or r.get("source_line") not in bad)
        ]

    result.calls = keep("calls", result.calls)
    result.spans = keep("spans", result.spans)
    return {}  # the rows that stay are converted when written


def ingest_object(
    obj: SourceObject,
    partition_date: date,
    run_id: str,
    now: datetime,
    overrides: Mapping[str, str] | None = None,
) -> IngestBatch:
    """One object -> its rows, its quarantine entries and its ingest_log row."""
    fmt, result = _normalized(obj, now, overrides)
    return _finished(obj, fmt, result, partition_date, run_id, now, _quarantine_misfits(result))


def _normalized(obj: SourceObject, now: datetime, overrides: Mapping[str, str] | None) -> tuple[str | None, Normalized]:
    """(format, the object's rows and problems), before the schema check."""
    source = SourceRef(uri=obj.uri, key=obj.key, etag=obj.etag)
    fmt: str | None = None
    if obj.read_error is not None and obj.data and is_line_delimited(obj.key):
        fmt, result = _normalize_truncated(obj, source, overrides)
    elif obj.read_error is not None:
        result = Normalized(problems=[Problem("corrupt_object", obj.read_error)])
    else:
        fmt, result = normalize_object(obj.data or b"", source, overrides)
    for row in (*result.calls, *result.spans):
        row["ingested_at"] = now
    return fmt, result


def _finished(
    obj: SourceObject,
    fmt: str | None,
    result: Normalized,
    partition_date: date,
    run_id: str,
    now: datetime,
    batches: dict[str, pa.RecordBatch],
) -> IngestBatch:
    """The batch of one object whose rows passed (or were quarantined by) the schema
    check; ``batches`` are the record batches that check converted them into."""
    quarantined = result.records_quarantined
    ingested = result.records_ingested
    if ingested + quarantined != result.records_read:  # a format module lost a record: a bug, not bad data
        raise AssertionError(f"{obj.key}: read {result.records_read}, ingested {ingested}, quarantined {quarantined}")
    object_failed = any(p.scope == "object" for p in result.problems)
    status = "failed" if object_failed and not ingested else ("partial" if quarantined or object_failed else "ok")
    log_row = {
        "source_key": obj.key,
        "etag": obj.etag,
        "source_uri": obj.uri,
        "size_bytes": obj.size,
        "last_modified": obj.last_modified,
        "partition_date": partition_date,
        "source_format": fmt,
        "records_read": result.records_read,
        "records_ingested": ingested,
        "records_quarantined": quarantined,
        "calls": len(result.calls),
        "spans": len(result.spans),
        "status": status,
        "run_id": run_id,
        "ingested_at": now,
    }
    log_row["record_sha256"] = record_sha256(log_row, LOG_BOOKKEEPING)
    return IngestBatch(
        calls=result.calls,
        spans=result.spans,
        ingest_log=[log_row],
        quarantine=[_quarantine_row(obj, p, fmt, run_id, now) for p in result.problems],
        fragments=result.fragments,
        converted={
            table: [(rows, batches[table])]
            for table, rows in (("calls", result.calls), ("spans", result.spans))
            if table in batches and rows
        },
    )


def _day_converted(batch: IngestBatch) -> dict[str, list[tuple[list[dict[str, Any]], pa.RecordBatch]]] | None:
    """The schema check of a whole day's rows at once: one record batch per table
    when every row fits (``IngestBatch.converted``), None when some row does not
    (then each object is checked on its own and the misfits quarantined). A value
    fits or not whatever rows are converted with it, so the answer is the same as
    checking object by object; one conversion of 40k rows costs a third less than
    523 of a few dozen each (per-column overhead, bench/ingest.py: 1.22-1.28 vs
    1.74 CPU-s)."""
    converted = {}
    for table in ("calls", "spans"):
        rows = list(getattr(batch, table))
        if not rows:
            continue
        try:
            converted[table] = [(rows, from_columns(rows, TABLES[table]))]
        except ARROW_ERRORS:
            return None
    return converted


@functools.cache
def use_jemalloc_for_arrow() -> str:
    """Make jemalloc Arrow's memory pool for the rest of the process (where the
    pyarrow build has it); returns the pool's name. A day's conversion to Arrow
    allocates a few hundred MB in many mid-size buffers, and with pyarrow's
    default (mimalloc) first-touching that memory cost ~1 CPU-s more on the
    40k-call day (bench/ingest.py, 3 runs each: 8.2-8.4 vs 9.1-10.0 CPU-s for
    the core). Buffers already allocated stay with the pool they came from."""
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:  # a build without jemalloc (Windows): keep the default
        pass
    return pa.default_memory_pool().backend_name


def ingest_objects(
    objects: Iterable[SourceObject],
    partition_date: date,
    run_id: str,
    now: datetime,
    overrides: Mapping[str, str] | None = None,
    *,
    progress: Callable[[int, IngestBatch], None] | None = None,
) -> IngestBatch:
    """Normalize every object, then assemble the batch (joins across objects).

    One process: with orjson and the Arrow conversion done once, starting
    worker processes (each re-importing the world) and shipping their rows
    back costs more than it saves on two cores (see bench/ingest.py).
    ``progress`` is called after each object with the count done and the batch so far.
    """
    use_jemalloc_for_arrow()
    batch = IngestBatch()
    normalized = []
    with gc_paused():
        for done, obj in enumerate(objects, start=1):
            fmt, result = _normalized(obj, now, overrides)
            # without the object's bytes: the day's rows are checked once all are read
            obj = SourceObject(obj.key, obj.uri, obj.etag, obj.size, obj.last_modified)
            normalized.append((obj, fmt, result))
            batch.add(_finished(obj, fmt, result, partition_date, run_id, now, {}))
            if progress is not None:
                progress(done, batch)
        converted = _day_converted(batch)
        if converted is not None:
            batch.converted = converted
        else:  # a value somewhere does not fit its column: check object by object, quarantining misfits
            batch = IngestBatch()
            for obj, fmt, result in normalized:
                batch.add(_finished(obj, fmt, result, partition_date, run_id, now, _quarantine_misfits(result)))
        del normalized
        assemble_batch(batch)
    return batch


def _last_by(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return list({r[key]: r for r in rows}.values())


def _merge_duplicate_calls(calls: list[dict[str, Any]], touched: set[int]) -> list[dict[str, Any]]:
    """One call per call_id: a later record wins, and keeps what only the
    earlier one had (a batch request line and its result line are one call).
    The ids of calls changed so are added to ``touched``."""
    merged: dict[str, dict[str, Any]] = {}
    for call in calls:
        earlier = merged.get(call["call_id"])
        if earlier is not None and carry_over(call, earlier):
            refinalize(call)
            touched.add(id(call))
        merged[call["call_id"]] = call
    return list(merged.values())


def assemble_batch(batch: IngestBatch) -> None:
    """Join the batch's fragments onto its calls; what finds no call stays in
    ``batch.fragments`` for ``settle_with_existing``.

    The same record can come twice in one batch (overlapping export windows):
    the later object (keys sort by time in every export layout) wins.
    """
    batch.calls = _merge_duplicate_calls(batch.calls, batch.touched)
    batch.spans = _last_by(batch.spans, "span_key")
    changed, batch.fragments = assemble(batch.calls, batch.fragments)
    batch.touched.update(id(call) for call in changed)


def existing_calls_to_read(batch: IngestBatch) -> tuple[set[str], set[date]]:
    """(trace ids, dates) of the `calls` rows settling the batch needs: the
    batch's own calls (to keep what was joined onto them before) and the
    targets of fragments left over. Dates are widened by a day each way."""
    trace_ids = {c["trace_id"] for c in batch.calls} | {f.trace_id for f in batch.fragments}
    days = {c["occurred_date"] for c in batch.calls}
    days |= {f.at.date() for f in batch.fragments if f.at is not None}
    if any(f.at is None for f in batch.fragments):
        days |= {r["partition_date"] for r in batch.ingest_log}
    widened = {d + timedelta(days=k) for d in days for k in (-1, 0, 1)}
    return trace_ids, widened


def settle_with_existing(batch: IngestBatch, existing: list[dict[str, Any]]) -> int:
    """Merge the batch with `calls` rows already in the warehouse.

    A call ingested again keeps the feedback, tools, retrievals and content
    joined onto it earlier; fragments left over from the batch (scores or log
    events arriving after their call) are joined onto existing calls, which are
    then rewritten. Returns how many existing calls changed.
    """
    in_batch = {c["call_id"]: c for c in batch.calls}
    others = []
    for row in existing:
        call = in_batch.get(row["call_id"])
        if call is None:
            others.append(row)
            continue
        if carry_over(call, row):
            refinalize(call)
            batch.touched.add(id(call))
    changed, batch.fragments = assemble(others, batch.fragments)
    batch.calls += changed
    return len(changed)
