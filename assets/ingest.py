"""Ingest stage: raw objects for a day -> calls, spans, ingest_log, quarantine; then traces.

One multi-asset parses each object once and writes the tables it feeds, one
shard of a day at a time (day x shard partitions: pipelines/partitions.py);
`traces` rolls up a day from what every shard of it landed. Unchanged objects (same key and etag as
last ingested) are skipped, so a re-run reads nothing and commits nothing.
"""

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import dagster as dg
import polars as pl

from assets.reporting import merge_metadata, preview
from pipelines.automation import after_load
from pipelines.ingest import quality
from pipelines.ingest.objects import IngestBatch
from pipelines.ingest.plan import DayPlan, plan_day
from pipelines.ingest.shards import ShardSpec
from pipelines.ingest.traces import CALL_COLUMNS, rollup
from pipelines.partitions import BY_DAY, SHARDS, daily, day_and_shard, day_of, day_shards_of
from pipelines.record.schema import SPECS
from pipelines.redact.residual import patterns_for_mode
from pipelines.resources.object_store import ObjectInfo, ObjectStore
from pipelines.resources.policies import Redaction
from pipelines.resources.stores import TemplateStore
from pipelines.resources.warehouse import MergeResult, Warehouse, to_arrow

if TYPE_CHECKING:
    from pipelines.redact.redactor import Redactor

READ_THREADS = 8


def _last_etags(warehouse: Warehouse, keys: list[str]) -> dict[str, str]:
    if not keys:
        return {}
    log = warehouse.read("ingest_log", pl.col("source_key").is_in(keys), ["source_key", "etag", "ingested_at"])
    latest = log.sort("ingested_at").group_by("source_key").agg(pl.col("etag").last())
    return dict(latest.iter_rows())


# The tables the raw-trace load writes; the UI shows each one's description from record/schema.py.
LOADED = ("calls", "spans", "ingest_log", "quarantine", "redaction_audit")


def _start_workers_early(redactor: "Redactor", rows: int) -> None:
    """Start the redactor's worker processes as soon as the rows parsed so far
    show the day will be redacted by them: spawning them and loading their NER
    models (~1.4 CPU-s each) then overlaps with the rest of the parsing, on the
    core the parent leaves idle, instead of delaying redaction (bench/ingest.py)."""
    if redactor.pool is not None and not redactor.pool.started and redactor.in_workers(rows):
        redactor.pool.start()


def _write(plan: DayPlan, warehouse: Warehouse) -> dict[str, MergeResult]:
    """The plan's writes in order: each table's ``MergeResult``."""
    written = {}
    for write in plan.writes:
        written[write.table] = write.merge_into(warehouse)
        if write.table in ("quarantine", "spans"):
            # queryable (empty) from the first run; a day of llm spans alone stores no spans
            warehouse.ensure(write.table)
    return written


def raw_traces_for(spec: ShardSpec) -> dg.AssetsDefinition:
    """The raw-trace load, partitioned day x the shards of ``spec`` (TRACELAKE_SHARDS)."""
    return dg.multi_asset(
        specs=[
            dg.AssetSpec(name, description=SPECS[name].description, kinds={"delta"}, group_name="ingest")
            for name in LOADED
        ],
        name="raw_traces",
        partitions_def=day_shards_of(spec),
        pool="warehouse",
    )(load_shard)


def load_shard(
    context: dg.AssetExecutionContext,
    source: ObjectStore,
    warehouse: Warehouse,
    redaction: Redaction,
    template_store: TemplateStore,
):
    day, shard = day_and_shard(context, source.shard_spec)
    now = datetime.now(UTC)
    listed = source.list_day(day, shard)
    seen = _last_etags(warehouse, [o.key for o in listed])

    def read_objects(todo: list[ObjectInfo]):
        # reads are I/O: threads; parsing (in the core) is one process
        with ThreadPoolExecutor(READ_THREADS) as readers:
            yield from readers.map(source.source_object, todo)

    def read_calls(trace_ids: list[str], days: list) -> list[dict]:
        where = pl.col("trace_id").is_in(trace_ids) & pl.col("occurred_date").is_in(days)
        return to_arrow("calls", warehouse.read("calls", where)).to_pylist()

    def report(done: int, total: int, batch: IngestBatch) -> None:
        if done % 50 == 0 or done == total:
            context.log.info(f"parsed {done}/{total} objects ({batch.records_read} records)")
        _start_workers_early(redactor, len(batch.calls) + len(batch.spans))

    # a templated system prompt keeps the names its template itself writes (a brand)
    redactor = redaction.redactor(templates=template_store.source)
    try:
        plan = plan_day(
            listed,
            seen,
            read_objects,
            read_calls,
            day=day,
            run_id=context.run.run_id,
            now=now,
            overrides=source.format_overrides,
            redactor=redactor,
            policy=redaction.policy(),
            patterns=patterns_for_mode(redaction.mode),
            progress=report,
            # the quality checks' Great Expectations context is built while the workers run NER
            redacting=quality.prepare_in_background,
            # the workers exit (freeing their state) while this process writes
            redacted=redactor.close,
        )
    finally:
        redactor.close()
    written = _write(plan, warehouse)
    for note in plan.notes:
        context.log.info(note)
    if plan.counts["records_quarantined_residual_pii"]:
        held = plan.counts["records_quarantined_residual_pii"]
        context.log.warning(f"residual PII: {held} rows quarantined instead of written")

    calls, spans, audit = written["calls"], written["spans"], written["redaction_audit"]
    quarantine, log = written["quarantine"], written["ingest_log"]
    batch, counts, entities = plan.batch, plan.counts, plan.entities

    on_day = pl.col("occurred_date") == day
    entity_table = "\n".join(
        ["| entity | values replaced |", "|---|---|"]
        + [f"| {e} | {n} |" for e, n in sorted(entities.items(), key=lambda kv: -kv[1])]
    )
    metadata = {
        "calls": {
            **counts,
            **merge_metadata(calls, warehouse, on_day),
            "preview": preview(batch.calls, ["service", "request_model", "finish_reason", "status", "latency_ms"]),
        },
        "spans": {**counts, **merge_metadata(spans, warehouse, on_day)},
        "redaction_audit": {
            **merge_metadata(audit, warehouse, on_day),
            "mode": redaction.mode,
            "entities": dg.MetadataValue.md(entity_table),
        },
        "quarantine": {
            **merge_metadata(quarantine, warehouse, pl.col("source_key").is_in([o.key for o in listed])),
            "preview": preview(batch.quarantine, ["source_format", "scope", "line", "error_class", "message"]),
        },
        "ingest_log": {
            **counts,
            **merge_metadata(log, warehouse, pl.col("partition_date") == day),
            "preview": preview(
                batch.ingest_log, ["source_format", "status", "records_read", "records_ingested", "records_quarantined"]
            ),
        },
    }
    # every table's metadata first, then the results back to back (milliseconds apart, not the seconds
    # of summarizing): automation sees the load whole, not a table whose checks start before the rest
    for table in LOADED:
        yield dg.MaterializeResult(asset_key=table, metadata=metadata[table])


raw_traces = raw_traces_for(SHARDS)


@dg.asset(
    deps=[dg.AssetDep("calls", partition_mapping=BY_DAY), dg.AssetDep("spans", partition_mapping=BY_DAY)],
    partitions_def=daily,
    kinds={"delta"},
    group_name="ingest",
    pool="warehouse",
    automation_condition=after_load(),
    description="One row per trace or agent session: totals, outcome, feedback, segment.",
)
def traces(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    day = day_of(context)
    # a trace that crosses midnight has spans on the next day
    window = pl.col("occurred_date").is_between(day - timedelta(days=1), day + timedelta(days=1))
    spans = warehouse.read("spans", window)
    day_traces = spans.filter(pl.col("occurred_date") == day)["trace_id"].unique()
    spans = spans.filter(pl.col("trace_id").is_in(day_traces.implode()))
    calls = warehouse.read("calls", window & pl.col("trace_id").is_in(day_traces.implode()), CALL_COLUMNS)
    rows = rollup(calls, spans, day, datetime.now(UTC))
    result = warehouse.merge("traces", rows, partitions=[day])
    context.log.info(f"{day}: {len(rows)} traces rolled up from {calls.height} calls and {spans.height} spans")
    return dg.MaterializeResult(
        metadata={
            **merge_metadata(result, warehouse, pl.col("occurred_date") == day),
            "traces": len(rows),
            "preview": preview(rows, ["service", "call_count", "step_count", "total_tokens", "outcome"]),
        }
    )
