"""Stored bytes per call, per table and per column, against the raw JSON, in one run.

    .venv/bin/python bench/storage.py                 # the 40,000-call demo day of bench/ingest.py
    .venv/bin/python bench/storage.py --calls 2000    # small and quick
    .venv/bin/python bench/storage.py --codecs        # also: calls and spans rewritten under other codecs
    .venv/bin/python bench/storage.py --what-if       # also: what calls would cost with values not yet left out

One demo day (``pipelines.demo.generate``, the day and seed of bench/ingest.py)
goes through the real stages as the nightly job runs them: ``ingest`` (with
redaction), ``retention`` and ``rot``. Every table is then compacted and
vacuumed (the layout a settled day has) and measured on disk:

- per table: Parquet data bytes and ``_delta_log`` bytes (the log carries a
  min/max statistics entry per file), per call of the day;
- per column: the compressed bytes of its column chunks summed over every
  file, sorted, with each file's footer counted as ``(footer)``;
- the raw JSON: the source objects decompressed, what the applications logged.

``--codecs`` writes the stored ``calls`` and ``spans`` again with delta-rs under
snappy and zstd levels 1, 3, 6 and 9, to show which level pays (bytes and
write time, in the same run). ``--what-if`` writes the stored ``calls`` again in
its layout with the recorded request hash left out where the sha256 of the stored
``request_json`` says it, against the same rows rewritten unchanged (block hashes
at 16 digits, the lever measured so before, are now what `calls` stores).
Results go to bench/out/storage/results.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from datetime import date
from pathlib import Path

# demo data on fixed days: the published demo hash key, partitions from well before them
os.environ.setdefault("TRACELAKE_DEMO", "1")
os.environ.setdefault("TRACELAKE_START_DATE", "2024-01-01")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dagster as dg  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from pipelines.definitions import build  # noqa: E402
from pipelines.demo import generate  # noqa: E402
from pipelines.resources.object_store import decompress  # noqa: E402
from pipelines.resources.warehouse import WRITER_PROPERTIES, writer_properties  # noqa: E402
from pipelines.settings import Settings  # noqa: E402

DAY = date(2026, 11, 29)
STAGES = ("ingest", "retention", "rot")
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
OUT = Path(__file__).parent / "out" / "storage"
# the warehouse's column properties, under each codec
CODECS = {
    "snappy": writer_properties("SNAPPY", None),
    **{f"zstd({level})": writer_properties(level=level) for level in (1, 3, 6, 9)},
}


def raw_json_bytes(source: Path) -> int:
    return sum(len(decompress(p.name, p.read_bytes())) for p in source.rglob("*") if p.is_file())


def table_bytes(path: Path) -> dict[str, object]:
    """Data, log and per-column bytes of one Delta table folder."""
    data = log = 0
    columns: dict[str, int] = defaultdict(int)
    for file in (p for p in path.rglob("*") if p.is_file()):
        size = file.stat().st_size
        if "_delta_log" in file.parts:
            log += size
            continue
        data += size
        if file.suffix != ".parquet":
            continue
        meta = pq.ParquetFile(file).metadata
        chunks = 0
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                chunk = group.column(c)
                top = chunk.path_in_schema.split(".")[0]
                columns[top] += chunk.total_compressed_size
                chunks += chunk.total_compressed_size
        columns["(footer)"] += size - chunks
    return {"data": data, "log": log, "columns": dict(columns)}


def codec_bytes(warehouse: Path, scratch: Path, table: str) -> dict[str, tuple[int, float]]:
    """(bytes, seconds) of ``table`` written again by delta-rs under each codec."""
    data = DeltaTable(str(warehouse / table)).to_pyarrow_table()
    out = {}
    for name, properties in CODECS.items():
        target = scratch / f"{table}-{name}"
        started = time.perf_counter()
        write_deltalake(str(target), data, writer_properties=properties)
        seconds = time.perf_counter() - started
        out[name] = (sum(p.stat().st_size for p in target.rglob("*.parquet")), seconds)
    return out


def derived_witness(calls: pa.Table) -> tuple[pa.Table, int]:
    """``calls`` without the recorded request hash where the stored body hashes to it."""
    bodies, recorded = calls["request_json"].to_pylist(), calls["rendered_request_sha256"].to_pylist()
    derivable = [
        b is not None and r is not None and hashlib.sha256(b.encode()).hexdigest() == r
        for b, r in zip(bodies, recorded, strict=True)
    ]
    kept = pa.array([None if d else r for d, r in zip(derivable, recorded, strict=True)], pa.string())
    names = calls.schema.names
    return calls.set_column(names.index("rendered_request_sha256"), "rendered_request_sha256", kept), sum(derivable)


def what_if(warehouse: Path, scratch: Path) -> dict[str, object]:
    """Bytes of the stored ``calls`` rewritten in their layout: unchanged, and with values left out."""
    calls = DeltaTable(str(warehouse / "calls")).to_pyarrow_table()
    witness, derivable = derived_witness(calls)
    variants = {"as stored": calls, "witness derived": witness}
    out: dict[str, object] = {"witness_derivable": derivable}
    for i, (name, table) in enumerate(variants.items()):
        target = scratch / f"calls-{i}"
        partitions = ["occurred_date", "occurred_hour"]
        write_deltalake(str(target), table, partition_by=partitions, writer_properties=WRITER_PROPERTIES)
        out[name] = sum(p.stat().st_size for p in target.rglob("*.parquet"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=40_000, help="calls on the day (default 40,000)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--columns", type=int, default=12, help="columns shown per table (all go to results.json)")
    parser.add_argument("--codecs", action="store_true", help="rewrite calls and spans under other codecs")
    parser.add_argument("--what-if", action="store_true", help="calls rewritten with values not yet left out")
    parser.add_argument("--keep", type=Path, help="copy the measured warehouse here (to study its files)")
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        settings = dataclasses.replace(
            Settings.from_env(),
            source_uri=str(root / "source"),
            warehouse_uri=str(root / "warehouse"),
            stores_uri=str(root / "stores"),
            endpoint_url=None,
        )
        summary = generate(settings.source_uri, args.calls, 1, args.seed, DAY, stores_out=settings.stores_uri)
        raw = raw_json_bytes(root / "source")
        definitions, instance = build(settings), dg.DagsterInstance.ephemeral()
        started = time.perf_counter()
        for stage in STAGES:
            job = definitions.resolve_job_def(stage)
            assert job.execute_in_process(partition_key=DAY.isoformat(), instance=instance, run_config=QUIET).success
        stages_s = time.perf_counter() - started
        warehouse = settings.warehouse()
        calls = warehouse.read("calls", columns=["call_id"]).height
        names = sorted(p.name for p in (root / "warehouse").iterdir() if (p / "_delta_log").is_dir())
        for name in names:
            warehouse.compact(name)
            warehouse.vacuum(name, orphan_grace_hours=0)
        measured = {name: table_bytes(root / "warehouse" / name) for name in names}
        if args.keep:
            shutil.copytree(root / "warehouse", args.keep / "warehouse", dirs_exist_ok=True)
        whatif = what_if(root / "warehouse", root / "what-if") if args.what_if else {}
        codecs = {}
        if args.codecs:
            codecs = {t: codec_bytes(root / "warehouse", root / "codecs", t) for t in ("calls", "spans")}

    def per_call(n: float) -> str:
        return f"{n / calls:,.1f}"

    total = sum(m["data"] + m["log"] for m in measured.values())
    tables = Table(
        title=f"stored bytes per call: one demo day, {calls:,} calls, raw JSON {raw / calls:,.0f} bytes/call"
    )
    for column in ("table", "data", "_delta_log", "total", "vs raw JSON"):
        tables.add_column(column, justify="left" if column == "table" else "right")
    for name, m in sorted(measured.items(), key=lambda kv: -(kv[1]["data"] + kv[1]["log"])):
        both = m["data"] + m["log"]
        tables.add_row(name, per_call(m["data"]), per_call(m["log"]), per_call(both), f"{both / raw:.3f}x")
    tables.add_row("[bold]all tables[/]", "", "", f"[bold]{per_call(total)}[/]", f"[bold]{total / raw:.3f}x[/]")
    console.print(tables)
    for name, m in sorted(measured.items(), key=lambda kv: -kv[1]["data"]):
        if m["data"] < 0.01 * total:
            continue
        cols = Table(title=f"{name}: bytes/call per column (largest {args.columns})")
        for column in ("column", "bytes/call", "share of table"):
            cols.add_column(column, justify="left" if column == "column" else "right")
        for column, n in sorted(m["columns"].items(), key=lambda kv: -kv[1])[: args.columns]:
            cols.add_row(column, per_call(n), f"{n / m['data']:.1%}")
        console.print(cols)
    for name, results in codecs.items():
        codec_table = Table(title=f"{name} written again by delta-rs, same rows")
        for column in ("codec", "bytes/call", "vs snappy", "write s"):
            codec_table.add_column(column, justify="left" if column == "codec" else "right")
        base = results["snappy"][0]
        for codec, (n, seconds) in results.items():
            codec_table.add_row(codec, per_call(n), f"{n / base:.2f}", f"{seconds:.2f}")
        console.print(codec_table)
    if whatif:
        base = whatif["as stored"]
        variants = Table(
            title=f"calls rewritten in its layout (recorded hash derivable: {whatif['witness_derivable']:,} calls)"
        )
        for column in ("calls", "bytes/call", "change", "all tables / raw JSON"):
            variants.add_column(column, justify="left" if column == "calls" else "right")
        for name, n in whatif.items():
            if name != "witness_derivable":
                change = n - base
                variants.add_row(name, per_call(n), per_call(change), f"{(total + change) / raw:.3f}x")
        console.print(variants)
    console.print(
        f"all tables / raw JSON: [bold]{total / raw:.3f}x[/] ({per_call(total)} of {raw / calls:,.0f} bytes per call); "
        f"stages {stages_s:.0f} s; load average {os.getloadavg()[0]:.1f}"
    )
    OUT.mkdir(parents=True, exist_ok=True)
    results = {
        "day": DAY.isoformat(),
        "calls": calls,
        "demo_calls": summary.calls,
        "raw_json_bytes": raw,
        "tables": measured,
        "total_bytes": total,
        "ratio_to_raw_json": total / raw,
        "codecs": codecs,
        "what_if": whatif,
    }
    (OUT / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
