"""What a table stores, as opposed to the row the core builds: no value that
another column of the same row already says, and no longer digest than its use needs.

``Warehouse`` applies ``to_stored`` to every write and ``from_stored`` to every
read, so code reading through the warehouse sees the rows the core built. A
query engine reading the Delta files directly sees the stored form; the README's
"Storage" section gives the expressions (the same as here).

- ``calls.request_sha256`` (the hash of the stored request body) is stored only
  where it differs from the recorded ``rendered_request_sha256``; null means
  "the same as recorded" when ``request_hash_matches`` is true, and "no request
  body" otherwise. ``computed_request_sha256`` reads it back.
- ``spans`` holds no ``llm_call`` span that its call in ``calls`` already says
  (``spans_to_store``): reading ``spans`` through the warehouse adds them back
  (``llm_spans``), built from ``calls`` exactly as ``record.rows.span_for_call``
  builds them. An llm span with anything more (an agent's step index, source
  attributes) is stored as it is.
- ``spans.call_id`` equal to the span's ``span_key`` (a call's llm span, stored because
  it says more) is stored as ``SAME_AS_SPAN_KEY``; ``span_call_ids`` reads it back.
- ``calls`` and ``spans`` store one column the row does not have: ``occurred_hour``,
  the UTC hour of ``occurred_at``, their second partition column (``schema.PARTITIONS``).
  A call's hour never changes, so a merge can look for it in its hour's files only
  (``Warehouse.merge``); reading drops the column again (``LAYOUT_COLUMNS``).
- ``rot_checks`` stores no ``recorded_sha256`` or ``trace_id`` that equals its call's
  ``rendered_request_sha256`` / ``trace_id`` in ``calls`` when the check is written
  (the check copies them from the call), and no ``rerendered_sha256`` that equals
  ``recorded_sha256`` (a verified call): null then means "the same as recorded", and
  a check that re-rendered nothing stores ``""`` (``NOT_RERENDERED``).
  ``rot_checks_with_calls`` reads them back.
- ``retention`` and ``redaction_audit`` store no ``trace_id`` that equals their call's
  in ``calls`` (same call_id and occurred_date) when the row is written; a row whose
  call is not in ``calls`` (a span's audit row, a call not ingested) keeps it.
  ``with_call_values`` reads it back (``FROM_CALL`` lists every such copy).
- ``record_sha256`` is the merge's change detector. In ``calls`` it is the
  record's pinned identity (tests/pinned) and keeps all 64 hex digits; in every
  other table only a change has to be noticed, so the first 8 (32 bits) are kept
  (``CHANGE_DIGEST_CHARS``; tables written with 16 digits keep working, see
  ``change_digest``).

Measured on the demo day by bench/storage.py: with zstd, a 64-digit hex digest
costs ~39 bytes a row, about as much as all of a call's text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.record.schema import CALLS, SPANS
from pipelines.rot.set_key import KEY_COLUMN, KEY_COLUMNS, set_keys

# Hex digits of record_sha256 kept outside `calls`. A merge compares a row only with the
# stored row of the same key, so what matters is the chance that a row that did change
# keeps its 32-bit digest: 1 in 4.3e9 per changed row. A row changes when its source object
# or the policy behind it does (a re-ingest, a sweep's mark), not on every write; even if
# 10M rows a day changed, one missed update would be expected every ~430 days, and it is
# caught by the next change of that row. 16 digits cost ~4.5 bytes a row more under zstd.
CHANGE_DIGEST_CHARS = 8
# tables whose record_sha256 is more than a change detector
FULL_RECORD_DIGEST = frozenset({"calls"})
HOUR = "occurred_hour"
# Rows in this order in the files written: a trace's times then differ little from the
# previous row's (traces: 47 -> 44 bytes a call). Sorting `calls` or the call-keyed tables
# by trace, session, user or service saves nothing: their bytes are per-row unique ids.
ROW_ORDER: dict[str, tuple[str, ...]] = {"traces": ("started_at",)}
# what storage adds to a table's rows to lay its files out: derived, dropped again on reading
LAYOUT_COLUMNS: dict[str, tuple[str, ...]] = {"calls": (HOUR,), "spans": (HOUR,)}


def computed_request_sha256() -> pl.Expr:
    """The hash of the call's request body as stored (``request_sha256``), whichever way it is stored."""
    same_as_recorded = pl.when(pl.col("request_hash_matches")).then(pl.col("rendered_request_sha256"))
    return pl.coalesce(pl.col("request_sha256"), same_as_recorded).alias("request_sha256")


def request_sha256_of(call: Mapping[str, Any]) -> str | None:
    """``computed_request_sha256`` for one row as a dict (a built row or a stored one)."""
    if call.get("request_sha256"):
        return call["request_sha256"]
    return call.get("rendered_request_sha256") if call.get("request_hash_matches") else None


def to_stored(
    name: str,
    data: pa.Table,
    stored_scan: Callable[[str], pl.LazyFrame | None] | None = None,
    call_rows: pa.Table | None = None,
) -> pa.Table:
    """``data`` (already of the table's schema) as the table stores it. ``stored_scan``
    scans another table as stored (rot_checks leaves out what its calls say); ``call_rows``
    are the `calls` rows that ``data`` was built from, written before it by the same run:
    they stand in for the stored `calls` table (ingest's audit rows: a shard then reads no
    other hour's calls)."""
    calls = None
    if name in FROM_CALL:
        if call_rows is not None:
            calls = pl.from_arrow(call_rows.select(_call_columns(FROM_CALL[name]))).lazy()
        elif stored_scan is not None:
            calls = stored_scan("calls")
    if name == "rot_checks":
        data = rot_checks_to_stored(data, calls)
    elif name in FROM_CALL:
        data = without_call_values(name, data, calls)
    names = data.schema.names
    if name == "calls":
        # derived from the values written, after redaction: it always describes its row
        keys = set_keys(pl.from_arrow(data.select(KEY_COLUMNS)))
        data = data.set_column(names.index(KEY_COLUMN), KEY_COLUMN, keys.to_arrow().cast(pa.string()))
        computed, recorded = data["request_sha256"], data["rendered_request_sha256"]
        matches = pc.fill_null(data["request_hash_matches"], False)
        same = pc.and_(matches, pc.fill_null(pc.equal(computed, recorded), False))
        stored = pc.if_else(same, pa.scalar(None, computed.type), computed)
        data = data.set_column(names.index("request_sha256"), "request_sha256", stored)
    if name == "spans":
        call_id = data["call_id"]
        same = pc.fill_null(pc.equal(call_id, data["span_key"]), False)
        kept = pc.if_else(same, pa.scalar(SAME_AS_SPAN_KEY, call_id.type), call_id)
        data = data.set_column(names.index("call_id"), "call_id", kept)
    if "record_sha256" in names and name not in FULL_RECORD_DIGEST:
        digest = pc.utf8_slice_codeunits(data["record_sha256"], 0, CHANGE_DIGEST_CHARS)
        data = data.set_column(names.index("record_sha256"), "record_sha256", digest)
    if name in ROW_ORDER and data.num_rows > 1:
        data = data.sort_by([(column, "ascending") for column in ROW_ORDER[name]])
    return with_layout(name, data)


def change_digest(name: str, alias: str) -> str:
    """The SQL expression of ``alias``'s stored ``record_sha256`` that a merge compares with the
    new row's: a table written with longer digests (16 digits, before ``CHANGE_DIGEST_CHARS``
    was 8) compares by their first digits, so an unchanged row is not rewritten only because
    its digest is stored longer."""
    column = f"{alias}.record_sha256"
    return column if name in FULL_RECORD_DIGEST else f"left({column}, {CHANGE_DIGEST_CHARS})"


def with_layout(name: str, data: pa.Table) -> pa.Table:
    """``data`` with the columns its table is laid out by (``LAYOUT_COLUMNS``) added where missing."""
    if HOUR in LAYOUT_COLUMNS.get(name, ()) and HOUR not in data.schema.names:
        data = data.append_column(HOUR, pc.cast(pc.hour(data["occurred_at"]), pa.int32()))
    return data


# the `calls` columns an llm span is built from (record.rows.span_for_call)
SPAN_SOURCE = (
    "call_id", "trace_id", "span_id", "parent_span_id", "session_id", "user_id", "source_format", "source_uri",
    "source_etag", "source_line", "ingested_at", "record_sha256", "request_model", "occurred_at", "ended_at",
    "occurred_date", "latency_ms", "status", "usage",
)  # fmt: skip


def llm_spans(calls: pl.LazyFrame) -> pl.LazyFrame:
    """The `spans` row of each call, as ``record.rows.span_for_call`` builds it; its
    record_sha256 is the call's (short): it changes when the call does."""
    null = pl.lit(None)
    usage = pl.col("usage").struct
    return calls.select(
        span_key=pl.col("call_id"),
        trace_id="trace_id",
        span_id="span_id",
        parent_span_id="parent_span_id",
        session_id="session_id",
        user_id="user_id",
        call_id="call_id",
        source_format="source_format",
        source_uri="source_uri",
        source_etag="source_etag",
        source_line="source_line",
        ingested_at="ingested_at",
        record_sha256=pl.col("record_sha256").str.slice(0, CHANGE_DIGEST_CHARS),
        kind=pl.lit("llm_call"),
        name=pl.concat_str(pl.lit("chat "), pl.col("request_model").fill_null("")).str.strip_chars(),
        step_index=null,
        occurred_at="occurred_at",
        ended_at="ended_at",
        occurred_date="occurred_date",
        duration_ms="latency_ms",
        status="status",
        tool_name=null,
        input_tokens=usage.field("input_tokens"),
        output_tokens=usage.field("output_tokens"),
        cost_usd=usage.field("cost_usd"),
        attributes_json=null,
    ).cast(_SPAN_TYPES)


_SPAN_TYPES = dict(pl.from_arrow(SPANS.empty_table()).schema)


def spans_to_store(spans: pa.Table, calls: Sequence[Mapping[str, Any]] | pa.Table) -> pa.Table:
    """``spans`` without the llm spans that ``llm_spans`` builds again, value for value, from ``calls``."""
    if spans.num_rows == 0:
        return spans
    if isinstance(calls, pa.Table):
        source = pl.from_arrow(calls.select(SPAN_SOURCE))
    else:
        source = pl.DataFrame([{k: c.get(k) for k in SPAN_SOURCE} for c in calls], schema=_call_types(), orient="row")
    built = llm_spans(source.lazy()).collect()
    frame = pl.from_arrow(spans)
    compared = [c for c in frame.columns if c not in ("span_key", "record_sha256")]
    same = frame.join(built, on="span_key", how="left", suffix="__built").select(
        pl.all_horizontal([pl.col(c).eq_missing(pl.col(f"{c}__built")) for c in compared])
        & pl.col("kind__built").is_not_null()
    )
    return spans.filter(pa.array((~same.to_series().fill_null(False)).to_list(), type=pa.bool_()))


def _call_types() -> dict[str, pl.DataType]:
    types = pl.from_arrow(CALLS.empty_table()).schema
    return {k: types[k] for k in SPAN_SOURCE}


def from_stored(name: str, frame: pl.LazyFrame, stored_scan: Callable[[str], pl.LazyFrame | None]) -> pl.LazyFrame:
    """The rows of a stored table as the core built them (digests stay short).
    ``stored_scan`` scans another table as stored (None when it does not exist)."""
    if name in LAYOUT_COLUMNS:
        frame = frame.drop(LAYOUT_COLUMNS[name], strict=False)
    if name == "calls":
        if KEY_COLUMN not in frame.collect_schema().names():  # a table written before the column
            frame = frame.with_columns(pl.lit(None, pl.String).alias(KEY_COLUMN))
        return frame.with_columns(computed_request_sha256())
    if name == "spans":
        calls = stored_scan("calls")
        return span_call_ids(frame) if calls is None else spans_with_calls(frame, calls)
    if name == "rot_checks":
        return rot_checks_with_calls(frame, stored_scan("calls"))
    if name in FROM_CALL:
        return with_call_values(name, frame, stored_scan("calls"))
    return frame


# `spans.call_id` as stored where it equals the span's own span_key (a call's llm span that
# says more than `calls` does): no call id is this string, and null keeps meaning "no call"
SAME_AS_SPAN_KEY = "="


def span_call_ids(spans: pl.LazyFrame) -> pl.LazyFrame:
    """Stored ``spans`` with the ``call_id`` that storage wrote as ``SAME_AS_SPAN_KEY``."""
    call_id = pl.col("call_id")
    return spans.with_columns(
        pl.when(call_id == SAME_AS_SPAN_KEY).then(pl.col("span_key")).otherwise(call_id).alias("call_id")
    )


def spans_with_calls(spans: pl.LazyFrame, calls: pl.LazyFrame) -> pl.LazyFrame:
    """Stored ``spans`` and the llm spans of ``calls`` that are not stored: the `spans` table as ingest built it."""
    spans = span_call_ids(spans.drop(LAYOUT_COLUMNS["spans"], strict=False))
    built = llm_spans(calls).join(spans.select("span_key"), on="span_key", how="anti")
    return pl.concat([spans, built.select(spans.collect_schema().names())], how="vertical_relaxed")


# `rot_checks.rerendered_sha256` as stored where the check re-rendered no request (null
# is taken: it means "the same as recorded_sha256")
NOT_RERENDERED = ""


@dataclass(frozen=True)
class CallCopies:
    """Columns a table copies from its call's row in `calls` (``(column, calls column)``), and
    the columns its call is found by. A copy equal to the call's value is stored as null."""

    columns: tuple[tuple[str, str], ...]
    keys: tuple[str, ...]


# retention and redaction_audit find their call by date too: a reader's filter on the day
# then reaches the `calls` side of the join and prunes its files (rot_checks' older stored
# rows were left out by call_id alone, and are read back so)
FROM_CALL: dict[str, CallCopies] = {
    "rot_checks": CallCopies((("recorded_sha256", "rendered_request_sha256"), ("trace_id", "trace_id")), ("call_id",)),
    "retention": CallCopies((("trace_id", "trace_id"),), ("call_id", "occurred_date")),
    "redaction_audit": CallCopies((("trace_id", "trace_id"),), ("call_id", "occurred_date")),
}


def _call_columns(copies: CallCopies) -> list[str]:
    return [*copies.keys, *(c for _, c in copies.columns)]


def _call_values(copies: CallCopies, calls: pl.LazyFrame, days: list) -> pl.LazyFrame:
    if days:
        calls = calls.filter(pl.col("occurred_date").is_in(days))
    return calls.select(*copies.keys, *(pl.col(c).alias(f"{c}__call") for _, c in copies.columns))


def without_call_values(name: str, data: pa.Table, calls: pl.LazyFrame | None) -> pa.Table:
    """``data`` of ``name`` without the values its call in ``calls`` (as stored, or None) says."""
    copies = FROM_CALL[name]
    if data.num_rows == 0 or calls is None:
        return data
    names = data.schema.names
    days = pc.unique(data["occurred_date"]).drop_null().to_pylist()
    frame = pl.from_arrow(data.select([*copies.keys, *(c for c, _ in copies.columns)]))
    of_call = (
        frame.lazy()
        .join(_call_values(copies, calls, days), on=list(copies.keys), how="left", maintain_order="left")
        .collect()
    )
    for column, call_column in copies.columns:
        kept = of_call.select(
            pl.when(pl.col(column) == pl.col(f"{call_column}__call")).then(None).otherwise(pl.col(column))
        ).to_series()
        data = data.set_column(names.index(column), column, kept.to_arrow().cast(data.schema.field(column).type))
    return data


def with_call_values(name: str, frame: pl.LazyFrame, calls: pl.LazyFrame | None) -> pl.LazyFrame:
    """Stored rows of ``name`` with what storage left out taken from their call in ``calls``
    (as stored; None: no `calls` table, nothing to take)."""
    if calls is None:
        return frame
    copies = FROM_CALL[name]
    names = frame.collect_schema().names()
    joined = frame.join(_call_values(copies, calls, []), on=list(copies.keys), how="left", maintain_order="left")
    return joined.with_columns(
        pl.coalesce(pl.col(column), pl.col(f"{call_column}__call")).alias(column)
        for column, call_column in copies.columns
    ).select(names)


def rot_checks_to_stored(data: pa.Table, calls: pl.LazyFrame | None) -> pa.Table:
    """``rot_checks`` rows as stored (see the module docstring); ``calls`` as stored, or None."""
    if data.num_rows == 0:
        return data
    names = data.schema.names
    recorded, rerendered = data["recorded_sha256"], data["rerendered_sha256"]
    same = pc.fill_null(pc.equal(rerendered, recorded), False)
    stored = pc.if_else(
        same, pa.scalar(None, rerendered.type), pc.fill_null(rerendered, pa.scalar(NOT_RERENDERED, rerendered.type))
    )
    data = data.set_column(names.index("rerendered_sha256"), "rerendered_sha256", stored)
    return without_call_values("rot_checks", data, calls)


def rot_checks_with_calls(checks: pl.LazyFrame, calls: pl.LazyFrame | None) -> pl.LazyFrame:
    """Stored ``rot_checks`` as the check wrote them: the call's values from ``calls``
    where storage left them out, and the re-rendered hash where it equals the recorded one."""
    checks = with_call_values("rot_checks", checks, calls)
    rerendered = pl.col("rerendered_sha256")
    return checks.with_columns(
        pl.when(rerendered.is_null())
        .then(pl.col("recorded_sha256"))
        .when(rerendered == NOT_RERENDERED)
        .then(pl.lit(None, pl.String))
        .otherwise(rerendered)
        .alias("rerendered_sha256")
    )
