"""The Delta tables are the interface: read with a data team's own tools, every table of
a demo warehouse has its key in full, non-null and unique, every foreign key resolves, and
the same analyst queries give the same answers through polars, DuckDB over Arrow
datasets, pandas, DuckDB's own `delta_scan` and `tracelake sql`."""

from __future__ import annotations

import glob
import json
import math
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import duckdb
import duckdb_extension_delta
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from pipelines.query import run_query
from pipelines.record.schema import LAYOUT, LAYOUT_KEY, SPECS, TABLES
from tests.tables.conftest import TRACELAKE, demo_env


def _tables(warehouse) -> list[str]:
    return [name for name in TABLES if warehouse.table(name) is not None]


def test_every_key_is_whole_and_every_reference_resolves(demo_warehouse):
    present = _tables(demo_warehouse)
    # the demo writes every table but the ones only debugging and erasure write
    assert set(TABLES) - set(present) == {"ablations", "regression_cases", "erasure_log"}
    for name in present:
        frame = pl.read_delta(demo_warehouse.table_uri(name))
        keys = list(SPECS[name].key)
        assert frame.height > 0 or name == "quarantine", name
        assert frame.select(keys).null_count().sum_horizontal().item() == 0, f"{name}: a null key"
        assert not frame.select(keys).is_duplicated().any(), f"{name}: a repeated key"
        for column, target in SPECS[name].references.items():
            target_key = SPECS[target].key[0]
            known = pl.read_delta(demo_warehouse.table_uri(target)).select(pl.col(target_key).alias(column))
            values = frame.select(column).drop_nulls()
            unresolved = values.join(known, on=column, how="anti").height
            assert unresolved == 0, f"{name}.{column}: {unresolved} of {values.height} find no {target}"
            # a key is a key: no prefixes, no sentinels
            assert values.filter(pl.col(column).str.len_chars() < 16).height == 0, f"{name}.{column}"
    # every model call is also a span, stored: a reader of `spans` needs no other table
    spans = pl.read_delta(demo_warehouse.table_uri("spans"))
    calls = pl.read_delta(demo_warehouse.table_uri("calls"))
    llm = spans.filter(pl.col("kind") == "llm_call")
    assert llm.height == calls.height and set(llm["call_id"]) == set(calls["call_id"])
    assert (llm["span_key"] == llm["call_id"]).all()
    # the request hash is the hash of the request as stored, on every row that has one
    has_body = calls.filter(pl.col("request_json").is_not_null())
    assert has_body["request_sha256"].null_count() == 0 and has_body.height > 0
    checks = pl.read_delta(demo_warehouse.table_uri("rot_checks"))
    assert checks["recorded_sha256"].null_count() == checks["trace_id"].null_count() == 0
    assert (checks["rerendered_sha256"].drop_nulls().str.len_chars() == 64).all()
    assert (calls["record_sha256"].str.len_chars() == 64).all()


def test_every_string_column_filters_the_same_through_a_pyarrow_dataset(demo_warehouse):
    """An equality filter on each string column of each table: a pyarrow dataset made by
    delta-rs (what the README's DuckDB path reads) counts what polars counts."""
    checked = 0
    for name in _tables(demo_warehouse):
        uri = demo_warehouse.table_uri(name)
        dataset = DeltaTable(uri).to_pyarrow_dataset()
        frame = pl.scan_delta(uri)
        for field in TABLES[name]:
            if not (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
                continue
            values = frame.select(pl.col(field.name).drop_nulls().unique().sort()).collect()[field.name]
            for value in (values.head(1).to_list() + values.tail(1).to_list())[:2]:
                want = frame.filter(pl.col(field.name) == value).select(pl.len()).collect().item()
                got = dataset.count_rows(filter=ds.field(field.name) == value)
                assert got == want, f"{name}.{field.name}: pyarrow {got}, polars {want}"
                checked += 1
    assert checked > 300


def test_stored_files_and_metadata_say_what_the_schema_module_says(demo_warehouse):
    for name in _tables(demo_warehouse):
        table = DeltaTable(demo_warehouse.table_uri(name))
        metadata = table.metadata()
        assert metadata.name == name and metadata.description == SPECS[name].description
        assert metadata.configuration.get("delta.dataSkippingNumIndexedCols") == "-1"
        assert list(metadata.partition_columns) == list(SPECS[name].partitioned_by)
        comments = {f.name: (f.metadata or {}).get("comment") for f in table.schema().fields}
        assert comments == {c.name: c.meaning for c in SPECS[name].columns}, name
        key = next(f for f in table.schema().fields if f.name == SPECS[name].key[0])
        assert key.metadata[LAYOUT_KEY] == str(LAYOUT)
        for uri in table.file_uris():
            stored = pq.read_schema(uri)
            views = [f.name for f in stored if "view" in str(f.type)]
            assert not views, f"{name}: {uri} stores {views} as view types"


# --- the same questions through five readers ----------------------------------------------


@dataclass(frozen=True)
class Query:
    name: str
    sql: str
    polars: Callable[[dict[str, pl.LazyFrame]], pl.DataFrame]
    pandas: Callable[[dict[str, pd.DataFrame]], pd.DataFrame]
    ordered: bool = False


def _cost(frame: pd.DataFrame) -> pd.Series:
    return frame["usage"].map(lambda u: None if u is None else u["cost_usd"])


# fmt: off
def _queries(trace_id: str, user_id: str) -> list[Query]:
    q = []
    q.append(Query(
        "calls per service and day",
        "SELECT service, occurred_date, count(*) AS n FROM calls GROUP BY 1, 2",
        lambda t: t["calls"].group_by("service", "occurred_date").agg(n=pl.len()).collect(),
        lambda t: t["calls"].groupby(["service", "occurred_date"]).size().reset_index(name="n"),
    ))
    q.append(Query(
        "p95 latency per service",
        "SELECT service, quantile_cont(latency_ms, 0.95) AS p95 FROM calls GROUP BY 1",
        lambda t: t["calls"].group_by("service").agg(p95=pl.col("latency_ms").quantile(0.95, "linear")).collect(),
        lambda t: t["calls"].groupby("service")["latency_ms"].quantile(0.95).reset_index(),
    ))
    q.append(Query(
        "rot status per service, joined to calls",
        "SELECT c.service, r.status, count(*) AS n FROM rot_checks r JOIN calls c USING (call_id) GROUP BY 1, 2",
        lambda t: t["rot_checks"].select("call_id", "status")
        .join(t["calls"].select("call_id", "service"), on="call_id")
        .group_by("service", "status").agg(n=pl.len()).collect(),
        lambda t: t["rot_checks"][["call_id", "status"]].merge(t["calls"][["call_id", "service"]], on="call_id")
        .groupby(["service", "status"]).size().reset_index(name="n"),
    ))
    q.append(Query(
        "retention reasons joined to calls",
        "SELECT service, reason, count(*) AS n FROM (SELECT c.service, unnest(r.reasons) AS reason "
        "FROM retention r JOIN calls c USING (call_id)) GROUP BY 1, 2",
        lambda t: t["retention"].select("call_id", "reasons")
        .join(t["calls"].select("call_id", "service"), on="call_id")
        .explode("reasons").drop_nulls("reasons").group_by("service", "reasons").agg(n=pl.len()).collect(),
        lambda t: t["retention"][["call_id", "reasons"]].merge(t["calls"][["call_id", "service"]], on="call_id")
        .explode("reasons").dropna(subset=["reasons"]).groupby(["service", "reasons"]).size().reset_index(name="n"),
    ))
    q.append(Query(
        "sampled calls per tier (list_contains)",
        "SELECT tier, count(*) FILTER (WHERE list_contains(reasons, 'sampled')) AS sampled, count(*) AS n "
        "FROM retention GROUP BY tier",
        lambda t: t["retention"].group_by("tier")
        .agg(sampled=pl.col("reasons").list.contains("sampled").sum(), n=pl.len()).collect(),
        lambda t: t["retention"].assign(sampled=t["retention"]["reasons"].map(lambda r: "sampled" in list(r)))
        .groupby("tier").agg(sampled=("sampled", "sum"), n=("tier", "size")).reset_index(),
    ))
    q.append(Query(
        "replay verdicts joined to the original output",
        "SELECT r.candidate, r.verdict, count(*) AS n, count(c.output_text) AS with_output, "
        "count(*) FILTER (WHERE r.new_output = c.output_text) AS unchanged "
        "FROM replays r JOIN calls c USING (call_id) GROUP BY 1, 2",
        lambda t: t["replays"].join(t["calls"].select("call_id", "output_text"), on="call_id")
        .group_by("candidate", "verdict")
        .agg(n=pl.len(), with_output=pl.col("output_text").count(),
             unchanged=(pl.col("new_output") == pl.col("output_text")).sum()).collect(),
        lambda t: t["replays"].merge(t["calls"][["call_id", "output_text"]], on="call_id")
        .assign(unchanged=lambda f: f["new_output"] == f["output_text"])
        .groupby(["candidate", "verdict"])
        .agg(n=("call_id", "size"), with_output=("output_text", "count"), unchanged=("unchanged", "sum"))
        .reset_index(),
    ))
    q.append(Query(
        "error classes per service, joined to traces",
        "SELECT t.service, e.error_class, count(*) AS n FROM semantic_errors e JOIN traces t USING (trace_id) "
        "GROUP BY 1, 2",
        lambda t: t["semantic_errors"].join(t["traces"].select("trace_id", "service"), on="trace_id")
        .group_by("service", "error_class").agg(n=pl.len()).collect(),
        lambda t: t["semantic_errors"].merge(t["traces"][["trace_id", "service"]], on="trace_id")
        .groupby(["service", "error_class"]).size().reset_index(name="n"),
    ))
    q.append(Query(
        "one trace's spans in order",
        f"SELECT span_key, kind, occurred_at, call_id FROM spans WHERE trace_id = '{trace_id}' "
        "ORDER BY occurred_at, span_key",
        lambda t: t["spans"].filter(pl.col("trace_id") == trace_id).sort("occurred_at", "span_key")
        .select("span_key", "kind", "occurred_at", "call_id").collect(),
        lambda t: t["spans"][t["spans"]["trace_id"] == trace_id].sort_values(["occurred_at", "span_key"])
        [["span_key", "kind", "occurred_at", "call_id"]],
        ordered=True,
    ))
    q.append(Query(
        "cost per candidate",
        "SELECT candidate, count(*) AS replays, sum(cost_usd) AS usd FROM replays GROUP BY 1",
        lambda t: t["replays"].group_by("candidate").agg(replays=pl.len(), usd=pl.col("cost_usd").sum()).collect(),
        lambda t: t["replays"].groupby("candidate").agg(replays=("candidate", "size"), usd=("cost_usd", "sum"))
        .reset_index(),
    ))
    q.append(Query(
        "calls per trace outcome (the README's)",
        "SELECT t.outcome, count(*) AS calls, avg(c.latency_ms) AS avg_ms FROM calls c JOIN traces t "
        "USING (trace_id) GROUP BY 1",
        lambda t: t["calls"].join(t["traces"].select("trace_id", "outcome"), on="trace_id")
        .group_by("outcome").agg(calls=pl.len(), avg_ms=pl.col("latency_ms").mean()).collect(),
        lambda t: t["calls"].merge(t["traces"][["trace_id", "outcome"]], on="trace_id")
        .groupby("outcome").agg(calls=("trace_id", "size"), avg_ms=("latency_ms", "mean")).reset_index(),
    ))
    q.append(Query(
        "one user's calls and cost",
        f"SELECT count(*) AS calls, sum(usage.cost_usd) AS usd FROM calls WHERE user_id = '{user_id}'",
        lambda t: t["calls"].filter(pl.col("user_id") == user_id)
        .select(calls=pl.len(), usd=pl.col("usage").struct.field("cost_usd").sum()).collect(),
        lambda t: pd.DataFrame([{
            "calls": int((t["calls"]["user_id"] == user_id).sum()),
            "usd": _cost(t["calls"][t["calls"]["user_id"] == user_id]).sum(),
        }]),
    ))
    q.append(Query(
        "redaction per span kind, joined to spans",
        "SELECT s.kind, a.source_table, count(*) AS n, sum(a.replacements) AS replaced "
        "FROM redaction_audit a JOIN spans s USING (span_key) GROUP BY 1, 2",
        lambda t: t["redaction_audit"].join(t["spans"].select("span_key", "kind"), on="span_key")
        .group_by("kind", "source_table").agg(n=pl.len(), replaced=pl.col("replacements").sum()).collect(),
        lambda t: t["redaction_audit"].merge(t["spans"][["span_key", "kind"]], on="span_key")
        .groupby(["kind", "source_table"]).agg(n=("kind", "size"), replaced=("replacements", "sum")).reset_index(),
    ))
    q.append(Query(
        "LLM spend per service and purpose, joined to calls",
        "SELECT c.service, l.purpose, count(*) AS n, sum(l.cost_usd) AS usd FROM llm_requests l "
        "JOIN calls c USING (call_id) GROUP BY 1, 2",
        lambda t: t["llm_requests"].join(t["calls"].select("call_id", "service"), on="call_id")
        .group_by("service", "purpose").agg(n=pl.len(), usd=pl.col("cost_usd").sum()).collect(),
        lambda t: t["llm_requests"].merge(t["calls"][["call_id", "service"]], on="call_id")
        .groupby(["service", "purpose"]).agg(n=("purpose", "size"), usd=("cost_usd", "sum")).reset_index(),
    ))
    q.append(Query(
        "agent events per span kind",
        "SELECT s.kind, e.event_type, count(*) AS n FROM agent_events e JOIN spans s ON s.span_key = e.event_key "
        "GROUP BY 1, 2",
        lambda t: t["agent_events"].join(t["spans"].select("span_key", "kind"), left_on="event_key",
                                         right_on="span_key").group_by("kind", "event_type").agg(n=pl.len()).collect(),
        lambda t: t["agent_events"].merge(t["spans"][["span_key", "kind"]], left_on="event_key", right_on="span_key")
        .groupby(["kind", "event_type"]).size().reset_index(name="n"),
    ))
    q.append(Query(
        "rot checks that re-rendered a request",
        "SELECT status, count(*) AS n, count(rerendered_sha256) AS rerendered FROM rot_checks GROUP BY 1",
        lambda t: t["rot_checks"].group_by("status")
        .agg(n=pl.len(), rerendered=pl.col("rerendered_sha256").count()).collect(),
        lambda t: t["rot_checks"].groupby("status")
        .agg(n=("status", "size"), rerendered=("rerendered_sha256", "count")).reset_index(),
    ))
    return q
# fmt: on


def _value(v: Any) -> Any:
    if v is None or v is pd.NaT or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, pd.Timestamp):
        v = v.to_pydatetime()
    if isinstance(v, Decimal):
        v = float(v)
    if isinstance(v, bool):
        return v
    if isinstance(v, float):
        return None if math.isnan(v) else round(v, 6)
    if isinstance(v, datetime):
        return v.astimezone(UTC).isoformat()
    if isinstance(v, date):
        return v.isoformat()
    return v


def _same(rows: list[tuple], reference: list[tuple]) -> bool:
    """Equal rows; floats (rounded to 6 places) may differ by one in the last place: readers sum in
    different orders, and two sums a hair apart can round to either side of a boundary."""

    def close(a, b) -> bool:
        if isinstance(a, float) or isinstance(b, float):
            return a is not None and b is not None and math.isclose(a, b, rel_tol=0, abs_tol=1.5e-6)
        return a == b

    return len(rows) == len(reference) and all(
        len(r) == len(e) and all(close(a, b) for a, b in zip(r, e, strict=True))
        for r, e in zip(rows, reference, strict=True)
    )


def _rows(rows: list[tuple], ordered: bool) -> list[tuple]:
    normal = [tuple(_value(v) for v in row) for row in rows]
    return normal if ordered else sorted(normal, key=lambda r: json.dumps(r, default=str))


def _delta_scan(warehouse, tables: list[str]) -> duckdb.DuckDBPyConnection:
    """DuckDB reading the Delta tables itself, offline: the extension the wheel carries."""
    extension = glob.glob(os.path.join(os.path.dirname(duckdb_extension_delta.__file__), "extensions", "*", "*"))
    con = duckdb.connect()
    con.execute(f"LOAD '{extension[0]}'")
    for name in tables:
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM delta_scan('{warehouse.table_uri(name)}')")
    return con


def test_analyst_queries_answer_the_same_through_every_reader(demo_warehouse):
    names = _tables(demo_warehouse)
    uris = {name: demo_warehouse.table_uri(name) for name in names}
    lazy = {name: pl.scan_delta(uri) for name, uri in uris.items()}
    spans = lazy["spans"].group_by("trace_id").agg(n=pl.len()).sort(["n", "trace_id"], descending=[True, False])
    trace_id = spans.collect()["trace_id"][0]
    users = lazy["calls"].drop_nulls("user_id").group_by("user_id").agg(n=pl.len())
    user_id = users.sort(["n", "user_id"], descending=[True, False]).collect()["user_id"][0]
    arrow = duckdb.connect()
    for name, uri in uris.items():
        arrow.register(name, DeltaTable(uri).to_pyarrow_dataset())
    frames = {name: DeltaTable(uri).to_pandas() for name, uri in uris.items()}
    delta_scan = _delta_scan(demo_warehouse, names)
    datasets = {name: demo_warehouse.dataset(name) for name in names}

    queries = _queries(trace_id, user_id)
    assert len(queries) >= 12
    for query in queries:
        answers = {
            "polars scan_delta": _rows(query.polars(lazy).rows(), query.ordered),
            "DuckDB over Arrow datasets": _rows(arrow.sql(query.sql).fetchall(), query.ordered),
            "pandas": _rows(list(query.pandas(frames).itertuples(index=False, name=None)), query.ordered),
            "DuckDB delta_scan": _rows(delta_scan.sql(query.sql).fetchall(), query.ordered),
            "tracelake sql": _rows(run_query(query.sql, datasets, 100_000).frame.rows(), query.ordered),
        }
        reference = answers["polars scan_delta"]
        assert reference, f"{query.name}: no rows to compare"
        for reader, rows in answers.items():
            assert _same(rows, reference), f"{query.name}: {reader} differs from polars: {rows} != {reference}"


def test_tracelake_sql_from_the_command_line_answers_as_the_readers_do(demo_folder, demo_warehouse):
    query = "SELECT service, count(*) AS n FROM calls GROUP BY service ORDER BY service"
    done = subprocess.run(
        [TRACELAKE, "sql", query, "--format", "json"],
        cwd=demo_folder,
        env=demo_env(demo_folder),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    want = pl.read_delta(demo_warehouse.table_uri("calls")).group_by("service").agg(n=pl.len()).sort("service")
    assert json.loads(done.stdout) == want.to_dicts()


@pytest.mark.parametrize(
    "query",
    [
        "SELECT '--' AS x, * FROM read_csv('/etc/passwd', header = false)",
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM '/etc/passwd'",
        "SELECT * FROM glob('/etc/*')",
        "COPY (SELECT 1) TO 'copied.csv'",
        "ATTACH 'other.duckdb'",
        "INSTALL httpfs",
        "SET enable_external_access = true",
    ],
)
def test_sql_cannot_reach_a_file_or_change_that(query, demo_warehouse, demo_folder):
    """DuckDB itself refuses (external access off, configuration locked), however the query is written."""
    raw = sorted((demo_folder / ".tracelake" / "source").rglob("*.jsonl*"))[0]
    for text in (query, f"SELECT * FROM read_ndjson('{raw}')"):
        with pytest.raises(Exception) as refused:
            run_query(text, {"calls": demo_warehouse.dataset("calls")}, 5)
        message = str(refused.value)
        assert "root:" not in message and "@" not in message
    assert not (demo_folder / "copied.csv").exists()
