"""One writer of a sharded day, as its own OS process: the ingest core for the objects
of this shard (``hash:SHARDS``, pipelines/shards.py), merged into the shared Delta tables.

    python -m tests.production.shard_writer SOURCE_URI WAREHOUSE_URI ENDPOINT DAY SHARD SHARDS

The same steps as the ingest asset (list, read, parse, settle with stored calls, merge
calls, spans, quarantine, then ingest_log last), without redaction, which has nothing
to do with how writers share tables. Prints what each merge did, as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import UTC, date, datetime

import polars as pl

from pipelines.ingest import SourceObject, existing_calls_to_read, ingest_objects, settle_with_existing
from pipelines.resources.object_store import CorruptObject, ObjectStore
from pipelines.resources.warehouse import Warehouse, to_arrow

RUN_ID = "shard-test"
NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def write_shard(source: ObjectStore, warehouse: Warehouse, day: date, shard: int, shards: int) -> dict:
    listed = source.list_day(day, shard)
    objects = []
    for info in listed:
        fields = dict(key=info.key, uri=source.uri_for(info.key), etag=info.etag, size=info.size)
        try:
            objects.append(SourceObject(**fields, last_modified=info.last_modified, data=source.read(info.key)))
        except CorruptObject as e:
            objects.append(SourceObject(**fields, last_modified=info.last_modified, read_error=str(e)))
    batch = ingest_objects(objects, day, RUN_ID, NOW, source.format_overrides)
    trace_ids, days = existing_calls_to_read(batch)
    if trace_ids:
        where = pl.col("trace_id").is_in(sorted(trace_ids)) & pl.col("occurred_date").is_in(sorted(days))
        settle_with_existing(batch, to_arrow("calls", warehouse.read("calls", where)).to_pylist())
    results = [
        warehouse.merge("calls", batch.calls, partitions=batch.dates("calls")),
        warehouse.merge("spans", batch.spans, partitions=batch.dates("spans")),
        warehouse.merge("quarantine", batch.quarantine),
        warehouse.merge("ingest_log", batch.ingest_log),
    ]
    return {"shard": shard, "objects": len(listed), "merges": [dataclasses.asdict(r) for r in results]}


def main() -> None:
    source_uri, warehouse_uri, endpoint, day, shard, shards = sys.argv[1:7]
    region = "us-east-1"
    source = ObjectStore(uri=source_uri, endpoint_url=endpoint, region=region, shards=f"hash:{shards}")
    warehouse = Warehouse(
        uri=warehouse_uri, endpoint_url=endpoint, region=region, access_key_id="testing", secret_access_key="testing"
    )
    report = write_shard(source, warehouse, date.fromisoformat(day), int(shard), int(shards))
    print(json.dumps(report, default=str), flush=True)


if __name__ == "__main__":
    main()
