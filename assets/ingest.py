"""Ingest stage: raw objects for a day -> calls, spans, ingest_log, quarantine; then traces.

One multi-asset parses each object once and writes the four tables it feeds;
`traces` rolls up from what landed. Unchanged objects (same key and etag as
last ingested) are skipped, so a re-run reads nothing and commits nothing.
"""

import os
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import dagster as dg
import polars as pl

from assets.reporting import merge_metadata, preview
from pipelines.ingest import (
    IngestBatch,
    SourceObject,
    existing_calls_to_read,
    ingest_objects,
    objects_to_ingest,
    settle_with_existing,
)
from pipelines.partitions import daily, day_and_shard, day_of
from pipelines.record.stored import spans_to_store
from pipelines.redact.residual import patterns_for_mode
from pipelines.redact.screen import account, screen_rows
from pipelines.resources.object_store import CorruptObject, ObjectInfo, ObjectStore
from pipelines.resources.policies import Redaction
from pipelines.resources.warehouse import Warehouse, in_list, to_arrow
from pipelines.traces import rollup

READ_THREADS = 8
PARSE_WORKERS = max(1, min(4, os.cpu_count() or 1))
# below this many (compressed) bytes, starting worker processes costs more than it saves
PARALLEL_FROM_BYTES = 8 * 1024 * 1024


def _read(source: ObjectStore, info: ObjectInfo) -> SourceObject:
    fields = dict(
        key=info.key, uri=source.uri_for(info.key), etag=info.etag, size=info.size, last_modified=info.last_modified
    )
    try:
        return SourceObject(**fields, data=source.read(info.key))
    except CorruptObject as e:
        return SourceObject(**fields, data=e.partial, read_error=str(e))


def _last_etags(warehouse: Warehouse, keys: list[str]) -> dict[str, str]:
    if not keys:
        return {}
    log = warehouse.read("ingest_log", pl.col("source_key").is_in(keys), ["source_key", "etag", "ingested_at"])
    latest = log.sort("ingested_at").group_by("source_key").agg(pl.col("etag").last())
    return dict(latest.iter_rows())


# What each table the raw-trace load writes holds (shown in the Dagster UI).
LOADED_TABLES = {
    "calls": "One row per model call: the frozen request and response, the replay unit.",
    "spans": "Every span or event: llm calls, tools, retrievals, thoughts, state changes.",
    "ingest_log": "One row per source object version processed, with record accounting.",
    "quarantine": "Records and objects that could not be ingested, with where and why.",
    "redaction_audit": "One row per redacted call: entity counts by type, mode, policy and detector versions.",
}


@dg.multi_asset(
    specs=[
        dg.AssetSpec(name, description=description, kinds={"delta"}, group_name="ingest")
        for name, description in LOADED_TABLES.items()
    ],
    partitions_def=daily,
    pool="warehouse",
)
def raw_traces(context: dg.AssetExecutionContext, source: ObjectStore, warehouse: Warehouse, redaction: Redaction):
    day, shard = day_and_shard(context, source.shard_spec)  # shard None: the whole day
    now = datetime.now(UTC)
    listed = source.list_day(day, shard)
    seen = _last_etags(warehouse, [o.key for o in listed])
    todo, unchanged = objects_to_ingest(listed, seen)
    context.log.info(f"{day}: {len(listed)} objects listed, {len(todo)} new or changed, {len(unchanged)} unchanged")

    def report(done: int, batch: IngestBatch) -> None:
        if done % 50 == 0 or done == len(todo):
            context.log.info(f"parsed {done}/{len(todo)} objects ({batch.records_read} records)")

    # Reads are I/O: threads. Parsing is CPU: processes, once there is enough to parse.
    workers = PARSE_WORKERS if sum(o.size for o in todo) > PARALLEL_FROM_BYTES else 1
    with ThreadPoolExecutor(READ_THREADS) as readers:
        objects = readers.map(lambda info: _read(source, info), todo)
        batch = ingest_objects(
            objects, day, context.run.run_id, now, source.format_overrides, workers=workers, progress=report
        )

    # Join log events, tools, retrievals and feedback onto the calls already
    # stored (late scores, split exports); the batch itself is assembled.
    trace_ids, days = existing_calls_to_read(batch)
    if trace_ids:
        where = pl.col("trace_id").is_in(sorted(trace_ids)) & pl.col("occurred_date").is_in(sorted(days))
        existing = to_arrow("calls", warehouse.read("calls", where)).to_pylist()
        updated = settle_with_existing(batch, existing)
        context.log.info(f"{updated} stored calls updated; {len(batch.fragments)} fragments found no call")

    # Redaction: nothing below this line sees raw text.
    with redaction.redactor() as redactor:
        redacted = redactor.redact_rows(batch.calls, batch.spans, now=now)
    batch.calls, batch.spans = redacted.calls, redacted.spans
    context.log.info(f"redaction ({redaction.mode}): " + ", ".join(f"{k} {v}" for k, v in redacted.stats.items()))

    # Residual-PII screen: a row that still matches is quarantined by pointer, not written.
    screened = screen_rows(
        batch.calls,
        batch.spans,
        redaction.policy(),
        keys_by_uri={source.uri_for(o.key): o.key for o in todo},
        run_id=context.run.run_id,
        now=now,
        patterns=patterns_for_mode(redaction.mode),
    )
    batch.calls, batch.spans = screened.calls, screened.spans
    batch.quarantine = [*batch.quarantine, *screened.quarantine]
    batch.ingest_log = account(batch.ingest_log, screened)
    redacted.audit = [row for row in redacted.audit if row["call_id"] not in screened.held]
    if screened.quarantine:
        context.log.warning(f"residual PII: {len(screened.quarantine)} rows quarantined instead of written")

    # A changed object replaces what its previous version wrote.
    changed = [source.uri_for(o.key) for o in todo if o.key in seen]
    replace = in_list("t.source_uri", changed) if changed else None
    calls = warehouse.merge("calls", batch.calls, partitions=batch.dates("calls"), replace=replace)
    # llm spans that `calls` already says are not stored twice; reading `spans` adds them back
    stored_spans = spans_to_store(to_arrow("spans", batch.spans), batch.calls)
    spans = warehouse.merge("spans", stored_spans, partitions=batch.dates("spans"), replace=replace)
    warehouse.ensure("spans")  # a day of llm spans only stores none
    audit = warehouse.merge("redaction_audit", redacted.audit, partitions=batch.dates("calls"))
    quarantine = warehouse.merge("quarantine", batch.quarantine)
    warehouse.ensure("quarantine")  # queryable (empty) from the first run
    # Last: an object is only marked done once its rows are in.
    log = warehouse.merge("ingest_log", batch.ingest_log)

    on_day = pl.col("occurred_date") == day
    counts = {
        "records_quarantined_residual_pii": len(screened.quarantine),
        "objects_listed": len(listed),
        "objects_skipped_unchanged": len(unchanged),
        "objects_ingested": len(todo),
        "records_read": batch.records_read,
        "records_quarantined": batch.records_quarantined,
    }
    yield dg.MaterializeResult(
        asset_key="calls",
        metadata={
            **counts,
            **merge_metadata(calls, warehouse, on_day),
            "preview": preview(
                batch.calls,
                ["call_id", "trace_id", "service", "request_model", "finish_reason", "status", "latency_ms"],
            ),
        },
    )
    yield dg.MaterializeResult(asset_key="spans", metadata={**counts, **merge_metadata(spans, warehouse, on_day)})
    entities: dict[str, int] = {}
    for row in redacted.audit:
        for entity, n in (row.get("entity_counts") or {}).items():
            entities[entity] = entities.get(entity, 0) + n
    yield dg.MaterializeResult(
        asset_key="redaction_audit",
        metadata={
            **merge_metadata(audit, warehouse, on_day),
            "mode": redaction.mode,
            "entities": dg.MetadataValue.md(
                "\n".join(
                    ["| entity | values replaced |", "|---|---|"]
                    + [f"| {e} | {n} |" for e, n in sorted(entities.items(), key=lambda kv: -kv[1])]
                )
            ),
        },
    )
    yield dg.MaterializeResult(
        asset_key="quarantine",
        metadata={
            **merge_metadata(quarantine, warehouse, pl.col("source_key").is_in([o.key for o in listed])),
            "preview": preview(batch.quarantine, ["source_key", "line", "error_class", "message"]),
        },
    )
    yield dg.MaterializeResult(
        asset_key="ingest_log",
        metadata={
            **counts,
            **merge_metadata(log, warehouse, pl.col("partition_date") == day),
            "preview": preview(
                batch.ingest_log, ["source_key", "status", "records_read", "records_ingested", "records_quarantined"]
            ),
        },
    )


@dg.asset(
    deps=["calls", "spans"],
    partitions_def=daily,
    kinds={"delta"},
    group_name="ingest",
    pool="warehouse",
    description="One row per trace or agent session: totals, outcome, feedback, segment.",
)
def traces(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    day = day_of(context)
    # a trace that crosses midnight has spans on the next day
    window = pl.col("occurred_date").is_between(day - timedelta(days=1), day + timedelta(days=1))
    spans = warehouse.read("spans", window)
    day_traces = spans.filter(pl.col("occurred_date") == day)["trace_id"].unique()
    spans = spans.filter(pl.col("trace_id").is_in(day_traces.implode()))
    calls = warehouse.read("calls", window & pl.col("trace_id").is_in(day_traces.implode()))
    rows = rollup(calls, spans, day, datetime.now(UTC))
    result = warehouse.merge("traces", rows, partitions=[day])
    context.log.info(f"{day}: {len(rows)} traces rolled up from {calls.height} calls and {spans.height} spans")
    return dg.MaterializeResult(
        metadata={
            **merge_metadata(result, warehouse, pl.col("occurred_date") == day),
            "traces": len(rows),
            "preview": preview(rows, ["trace_id", "service", "call_count", "step_count", "total_tokens", "outcome"]),
        }
    )
