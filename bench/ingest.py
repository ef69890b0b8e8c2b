"""Ingest throughput: tracelake's ingest stage against a naive loader, same day, same run.

    python bench/ingest.py              # a 40,000-call demo day
    python bench/ingest.py --calls 2000 # quick
    python bench/ingest.py --no-stage --floor  # + the core's fixed steps, one by one

The naive baseline is what a first version usually is: json.loads per line,
a pandas frame per object (nested values as JSON text), one write_deltalake
append per object. It validates nothing, hashes nothing, dedupes nothing and
is not idempotent.

Against it, two tracelake numbers, each in wall seconds and CPU-seconds
(this process and its children, all threads):

- the ingest core, the same work the baseline does done properly: list, read,
  validate and normalize, hash, assemble, plan (``plan_day``, the call the
  asset makes, without redaction), then the plan's idempotent writes of calls,
  spans, quarantine and ingest_log (one process: see pipelines/ingest/objects.py);
- the whole `ingest` stage as Dagster runs it, which adds PII redaction (with
  NER when the model is installed), the traces rollup and the quality and
  residual-PII checks. Redaction dominates it; bench/redact.py measures it alone.

``--floor`` also measures, on the core's own rows, the steps no way of building
the rows removes (strict parsing, the pinned hashes, the Arrow conversion, the
Delta writes, freeing): the floor under the core's CPU-seconds. Beside it, the
floor of the other design, a core that never builds row dicts: the day's
records parsed straight into Arrow by polars's JSON readers, which such a core
would pay before validating, normalizing or hashing anything.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TypeVar

# demo data on fixed days: the published demo hash key, partitions from well before them
os.environ.setdefault("TRACELAKE_DEMO", "1")
os.environ.setdefault("TRACELAKE_START_DATE", "2024-01-01")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.environments: a day's runs

import dagster as dg  # noqa: E402
import pandas as pd  # noqa: E402
import polars as pl  # noqa: E402
from deltalake import write_deltalake  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from pipelines.collector import gc_paused  # noqa: E402
from pipelines.demo import generate  # noqa: E402
from pipelines.formats import format_for, is_line_delimited  # noqa: E402
from pipelines.formats.base import json_records  # noqa: E402
from pipelines.ingest.objects import SourceObject  # noqa: E402
from pipelines.ingest.plan import plan_day  # noqa: E402
from pipelines.record.canonical import (  # noqa: E402
    block_hashes_from_json,
    call_id,
    canonical_request,
    parse_canonical,
    record_sha256,
    request_plain,
    sha256_hex,
)
from pipelines.record.rows import BOOKKEEPING, from_columns  # noqa: E402
from pipelines.record.schema import TABLES  # noqa: E402
from pipelines.resources.object_store import ObjectStore  # noqa: E402
from pipelines.resources.warehouse import Warehouse  # noqa: E402
from pipelines.settings import Settings  # noqa: E402
from tests.environments import run_stage  # noqa: E402

DAY = date(2026, 11, 29)
NOW = datetime.now(UTC)
T = TypeVar("T")
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def naive(source: Path, warehouse: Path) -> tuple[int, int]:
    """(records, uncompressed bytes) loaded the naive way."""
    store = ObjectStore(uri=str(source))
    records = size = 0
    for info in store.list_day(DAY):
        data = store.read(info.key)
        size += len(data)
        lines = data.splitlines() if is_line_delimited(info.key) else [data]
        rows = [json.loads(line) for line in lines if line.strip()]
        flat = [{k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in r.items()} for r in rows]
        frame = pd.DataFrame(flat).astype("string")
        write_deltalake(str(warehouse / "raw"), frame, mode="append", schema_mode="merge")
        records += len(rows)
    return records, size


def core(source: Path, warehouse: Path) -> int:
    """The asset's load path without Dagster and without redaction: the same
    plan_day call (list, read, validate and normalize, hash, assemble, plan),
    then the plan's writes (idempotent merges, an append into an empty day)."""
    store, tables = ObjectStore(uri=str(source)), Warehouse(uri=str(warehouse))

    def read_objects(todo):
        with ThreadPoolExecutor(8) as readers:
            yield from readers.map(
                lambda i: SourceObject(i.key, store.uri_for(i.key), i.etag, i.size, i.last_modified, store.read(i.key)),
                todo,
            )

    plan = plan_day(store.list_day(DAY), {}, read_objects, lambda ids, days: [], day=DAY, run_id="bench", now=NOW)
    for write in plan.writes:
        write.merge_into(tables)
    return len(plan.batch.calls)


def floor(source: Path, warehouse: Path) -> tuple[dict[str, float], float]:
    """CPU-seconds of the core's steps that stay whatever builds the rows: the
    parts of its work fixed by the pinned outputs and the tables' formats,
    measured one by one on the core's own rows for the day (the floor under
    the core's CPU-seconds if making the rows cost nothing)."""
    store = ObjectStore(uri=str(source))
    listed = store.list_day(DAY)
    out: dict[str, float] = {}

    def timed(name: str, work: Callable[[], T]) -> T:
        result, _, cpu = measured(work)
        out[name] = cpu
        return result

    def read(i):
        return SourceObject(i.key, store.uri_for(i.key), i.etag, i.size, i.last_modified, store.read(i.key))

    def read_all() -> list[SourceObject]:
        with ThreadPoolExecutor(8) as readers:
            return list(readers.map(read, listed))

    objects = timed("list, read and decompress the objects", read_all)
    timed(
        "parse every record (orjson + the strict-JSON guard)",
        lambda: sum(1 for o in objects for _ in json_records(o.data or b"", lines=is_line_delimited(o.key))),
    )
    with gc_paused():
        plan = plan_day(listed, {}, lambda todo: iter(objects), lambda ids, days: [], day=DAY, run_id="bench", now=NOW)
    lines, documents = _by_format(objects)
    objects.clear()
    arrow_parse = measured(lambda: _into_arrow(lines, documents))[2]
    lines.clear()
    documents.clear()
    _fixed_steps(plan, Warehouse(uri=str(warehouse)), timed)
    timed("freeing the day's rows and tables", plan.__dict__.clear)
    return out, arrow_parse


def _fixed_steps(plan, warehouse: Warehouse, timed: Callable[[str, Callable[[], object]], object]) -> None:
    batch = plan.batch
    rows = [*batch.calls, *batch.spans]
    requests = [parse_canonical(c["request_json"]) for c in batch.calls]
    plain = [r if request_plain(c["request_json"]) else None for r, c in zip(requests, batch.calls, strict=True)]
    documents = [[(d["doc_id"], d.get("text")) for d in _documents(c)] for c in batch.calls]
    with gc_paused():
        timed("record_sha256 of every row (pinned)", lambda: [record_sha256(r, BOOKKEEPING) for r in rows])
        timed(
            "canonical request JSON and request_sha256 (pinned)",
            lambda: [sha256_hex(canonical_request(r)[0]) for r in requests if r is not None],
        )
        timed(
            "block hashes, from the serialized request (pinned)",
            lambda: [
                block_hashes_from_json(c["request_json"], docs, plain_request=p)
                for c, docs, p in zip(batch.calls, documents, plain, strict=True)
            ],
        )
        timed(
            "call ids and span keys (sha256)",
            lambda: [call_id(r["source_format"], r["trace_id"], r["span_id"]) for r in rows],
        )
        timed(
            "Arrow conversion of calls and spans (the schema check)",
            lambda: [from_columns(getattr(batch, t), TABLES[t]) for t in ("calls", "spans")],
        )
    for write in plan.writes:  # the plan's own tables, as the core writes them
        timed(f"Delta write of {write.table}", lambda w=write: w.merge_into(warehouse))


def _by_format(objects: list[SourceObject]) -> tuple[dict[str, list[bytes]], dict[str, list[bytes]]]:
    """The objects' bytes by format: ({format: line-delimited objects}, {format: documents})."""
    lines: dict[str, list[bytes]] = {}
    documents: dict[str, list[bytes]] = {}
    for o in objects:
        data = o.data or b""
        if is_line_delimited(o.key):
            lines.setdefault(format_for(o.key, data) or "", []).append(data if data.endswith(b"\n") else data + b"\n")
        else:
            documents.setdefault(format_for(o.key, data) or "", []).append(data)
    return lines, documents


def _into_arrow(lines: dict[str, list[bytes]], documents: dict[str, list[bytes]]) -> int:
    """The day's records read into Arrow by polars's native readers, one reader call per
    format (line-delimited objects joined, documents as one JSON array): the parse a core
    without row dicts would make. pyarrow's JSON reader cannot take the day at all (an
    Anthropic message's ``content`` is a string in one row and a list in the next)."""
    frames = [pl.read_ndjson(b"".join(parts), infer_schema_length=None) for parts in lines.values()]
    frames += [pl.read_json(b"[" + b",".join(parts) + b"]", infer_schema_length=None) for parts in documents.values()]
    return sum(frame.height for frame in frames)


def _documents(call: dict) -> list[dict]:
    return (call.get("retrieval") or {}).get("documents") or []


def stage(source: Path, warehouse: Path, stores: Path) -> None:
    """The ingest stage for the day, in process (as `tracelake run ingest` runs it: the load of
    every shard of the day, then the `ingest` job), with the demo's ingredient stores
    (redaction looks the calls' templates up in them)."""
    settings = Settings.from_env()
    where = {"source_uri": str(source), "warehouse_uri": str(warehouse), "stores_uri": str(stores)}
    settings = type(settings)(**{**settings.__dict__, **where})
    result = run_stage(settings, "ingest", DAY.isoformat(), dg.DagsterInstance.ephemeral(), run_config=QUIET)
    assert result.success


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-stage", action="store_true", help="skip the full Dagster stage (minutes with NER)")
    parser.add_argument("--floor", action="store_true", help="also measure the core's fixed steps one by one")
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        summary = generate(str(root / "source"), args.calls, 1, args.seed, DAY, stores_out=str(root / "stores"))
        console.print(
            f"demo day: {summary.calls:,} calls in {summary.objects} objects "
            f"({summary.bytes_written / 1e6:.1f} MB compressed), {os.cpu_count()} cores"
        )

        (records, raw_bytes), naive_s, naive_cpu = measured(lambda: naive(root / "source", root / "naive"))
        calls, core_s, core_cpu = measured(lambda: core(root / "source", root / "core"))
        fixed, arrow_parse = floor(root / "source", root / "floor") if args.floor else (None, 0.0)
        stage_s = stage_cpu = None
        if not args.no_stage:
            _, stage_s, stage_cpu = measured(lambda: stage(root / "source", root / "warehouse", root / "stores"))

    mb = raw_bytes / 1e6
    table = Table(title=f"ingest, one {summary.calls:,}-call day ({mb:.0f} MB of JSON)")
    for column in ("loader", "seconds", "CPU-seconds", "calls/s", "MB/s"):
        table.add_column(column, justify="left" if column == "loader" else "right")

    def row(name: str, seconds: float, cpu: float, count: int) -> None:
        table.add_row(name, f"{seconds:.1f}", f"{cpu:.1f}", f"{count / seconds:,.0f}", f"{mb / seconds:.1f}")

    row("naive (json + pandas + append per object)", naive_s, naive_cpu, summary.calls)
    row("tracelake ingest core (parse, hash, plan, write)", core_s, core_cpu, calls)
    if stage_s is not None:
        row("tracelake ingest stage (+ redaction, rollup, checks)", stage_s, stage_cpu, calls)
    console.print(table)
    console.print(
        f"ratio (naive / tracelake ingest core): wall [bold]{naive_s / core_s:.2f}x[/], "
        f"CPU-seconds [bold]{naive_cpu / core_cpu:.2f}x[/]; "
        f"{records:,} records read by the baseline, {calls:,} calls stored by tracelake; "
        f"load average during the run {os.getloadavg()[0]:.1f}"
    )
    if fixed is not None:
        steps = Table(title="the core's fixed steps (CPU-seconds, each measured alone on the core's rows)")
        steps.add_column("step")
        steps.add_column("CPU-s", justify="right")
        for name, cpu in fixed.items():
            steps.add_row(name, f"{cpu:.2f}")
        steps.add_row("[bold]sum[/]", f"[bold]{sum(fixed.values()):.2f}[/]")
        console.print(steps)
        console.print(
            f"8x in CPU-seconds needs the core at {naive_cpu / 8:.2f} CPU-s; it took {core_cpu:.2f}, "
            f"of which these steps {sum(fixed.values()):.2f} and the rows' construction the rest"
        )
        read = fixed["list, read and decompress the objects"]
        writes = sum(cpu for name, cpu in fixed.items() if name.startswith("Delta write"))
        console.print(
            f"a core without row dicts (the day parsed straight into Arrow): read {read:.2f} + "
            f"polars's parse {arrow_parse:.2f} + the same Delta writes {writes:.2f} = "
            f"{read + arrow_parse + writes:.2f} CPU-s before it validates, normalizes or hashes anything"
        )


def measured(work: Callable[[], T]) -> tuple[T, float, float]:
    """(result, wall seconds, CPU seconds of this process and its children, all threads)."""

    def cpu() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    cpu_before, started = cpu(), time.perf_counter()
    result = work()
    return result, time.perf_counter() - started, cpu() - cpu_before


if __name__ == "__main__":
    main()
