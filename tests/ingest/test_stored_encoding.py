"""How the warehouse encodes hex digests and ids in its Parquet files
(pipelines/resources/warehouse.py, ``HEX_DIGESTS``): DELTA_LENGTH_BYTE_ARRAY
without a dictionary, in the files a merge writes and in those compaction writes,
and every reader tracelake uses reads them back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
from deltalake import DeltaTable

from pipelines.record import canonical
from pipelines.record.rows import finalize_call, new_call
from pipelines.record.stored import CALLS_RECORD_DIGEST_CHARS
from pipelines.resources.warehouse import HEX_DIGESTS, HEX_ENCODING, Warehouse

AT = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)


def _calls(first: int, count: int) -> list[dict]:
    out = []
    for i in range(first, first + count):
        body = {"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": [{"role": "user", "content": f"hi {i}"}]}
        call = new_call(
            source_format="frozen_call",
            trace_id=canonical.sha256_hex(f"trace {i // 3}")[:32],
            span_id=canonical.sha256_hex(f"span {i}")[:16],
            occurred_at=AT + timedelta(seconds=i),
            ended_at=AT + timedelta(seconds=i, milliseconds=850),
            request_model="claude-sonnet-4-6",
            status="ok",
            system_text="You are a helpful assistant. Answer briefly.",
            request_json=canonical.canonical_json(body),
            rendered_request_sha256=canonical.request_sha256(body),
        )
        out.append(finalize_call(call))
    return out


def _data_files(table_path: Path) -> list[Path]:
    return [f for f in table_path.rglob("*.parquet") if "_delta_log" not in f.parts]


def _encodings(table_path: Path) -> dict[str, set[str]]:
    """Column path -> the encodings its chunks use, over every data file of the table."""
    seen: dict[str, set[str]] = {}
    for file in _data_files(table_path):
        meta = pq.ParquetFile(file).metadata
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                chunk = meta.row_group(g).column(c)
                seen.setdefault(chunk.path_in_schema, set()).update(chunk.encodings)
    return seen


def _assert_hex_encoded(table_path: Path) -> None:
    encodings = _encodings(table_path)
    for column in ("trace_id", "span_id", "record_sha256", "rendered_request_sha256"):
        assert column in HEX_DIGESTS
        assert HEX_ENCODING in encodings[column], (column, encodings[column])
        assert "RLE_DICTIONARY" not in encodings[column] and "PLAIN" not in encodings[column], column
    # text keeps the default (a dictionary, plain where it falls back)
    assert HEX_ENCODING not in encodings["system_text"]


def test_hex_columns_are_written_and_compacted_as_delta_length_byte_arrays(tmp_path):
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    first, second = _calls(0, 30), _calls(30, 30)
    warehouse.merge("calls", first)
    warehouse.merge("calls", second)
    path = Path(warehouse.table_uri("calls"))
    _assert_hex_encoded(path)

    # compaction rewrites the hour's two files into one under its own properties
    assert warehouse.compact("calls") >= 2
    warehouse.vacuum("calls", orphan_grace_hours=0)
    assert len(_data_files(path)) == 1
    _assert_hex_encoded(path)

    # every reader reads the values back
    want = sorted(c["record_sha256"][:CALLS_RECORD_DIGEST_CHARS] for c in first + second)
    assert sorted(DeltaTable(str(path)).to_pyarrow_table()["record_sha256"].to_pylist()) == want
    assert sorted(pl.read_delta(str(path))["record_sha256"].to_list()) == want
    (file,) = _data_files(path)
    assert sorted(pq.read_table(file)["record_sha256"].to_pylist()) == want
    assert sorted(warehouse.read("calls")["span_id"].to_list()) == sorted(c["span_id"] for c in first + second)
