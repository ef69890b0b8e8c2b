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
- ``spans.span_key`` (sha256 of "source_format|trace_id|span_id") is stored as null where
  it is that; ``span_call_ids`` derives it again and a merge finds a stored span by those
  three columns (``key_predicate``).
- ``calls`` and ``spans`` store one column the row does not have: ``occurred_hour``,
  the UTC hour of ``occurred_at``, their second partition column (``schema.PARTITIONS``).
  A call's hour never changes, so a merge can look for it in its hour's files only
  (``Warehouse.merge``); reading drops the column again (``LAYOUT_COLUMNS``).
- ``rot_checks`` stores no ``recorded_sha256`` or ``trace_id`` that equals its call's
  ``rendered_request_sha256`` / ``trace_id`` in ``calls`` when the check is written
  (the check copies them from the call), and no ``rerendered_sha256`` that equals
  ``recorded_sha256`` (a verified call): null then means "the same as recorded", and
  a check that re-rendered nothing stores ``""`` (``NOT_RERENDERED``); one that differs
  keeps its first 16 digits (``RERENDERED_DIGEST_CHARS``), read back so.
  ``rot_checks_with_calls`` reads them back.
- ``retention``, ``rot_checks`` and ``redaction_audit`` name their call by the first 16
  digits of its id where no other call of the row's day begins with them when the row is
  written (``short_call_ids``), and in full otherwise; reading puts the full id back
  (``resolved_call_ids``, through ``with_call_values``).
- ``retention`` and ``redaction_audit`` store no ``trace_id`` that equals their call's
  in ``calls`` (same call_id and occurred_date) when the row is written; a row whose
  call is not in ``calls`` (a span's audit row, a call not ingested) keeps it.
  ``with_call_values`` reads it back (``FROM_CALL`` lists every such copy).
- ``calls.block_hashes[].sha256`` keeps the first ``BLOCK_DIGEST_CHARS`` (16) hex digits
  of each block hash (``stored_block_hashes``): a block hash only tells a rot check which
  ingredient moved, and the check compares by those digits
  (``record.canonical.same_block_digest``). The row is built with the full digests (its
  ``record_sha256`` covers them as computed, so it is the same as before); reading gives
  the 16 digits, also from a table written with 64 (``BLOCK_DIGESTS_READ``).
- ``record_sha256`` is the merge's change detector: a merge rewrites a stored row only
  where it differs from the new row's. No table stores all 64 digits any more
  (``record_digest_chars``): outside `calls` the first 8 (32 bits) are kept
  (``CHANGE_DIGEST_CHARS``); `calls` keeps the first **16** (64 bits,
  ``CALLS_RECORD_DIGEST_CHARS``), the documented successor of the record's pinned
  digest: the core still computes the full sha256 (``record.canonical.record_sha256``),
  and reading gives its first 16 digits (tests/pinned compares them with the pinned
  value's). Tables written with longer digests (64 in `calls`, 16 elsewhere) keep
  merging without a second row or a rewrite of an unchanged one: ``change_digest``
  compares by the first digits.

Measured on the demo day by bench/storage.py: with zstd (and DELTA_LENGTH_BYTE_ARRAY,
``resources/warehouse.HEX_DIGESTS``), a 64-digit hex digest costs ~34 bytes a row (more than a
call's compressed request body, 31), 16 digits ~8.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.record.canonical import BLOCK_DIGEST_CHARS
from pipelines.record.canonical import call_id as key_of
from pipelines.record.schema import CALLS, KEYS, PARTITIONS, SPANS
from pipelines.rot.set_key import KEY_COLUMN, KEY_COLUMNS, set_keys

# Hex digits of record_sha256 kept outside `calls`. A merge compares a row only with the
# stored row of the same key, so what matters is the chance that a row that did change
# keeps its 32-bit digest: 1 in 4.3e9 per changed row. A row changes when its source object
# or the policy behind it does (a re-ingest, a sweep's mark), not on every write; even if
# 10M rows a day changed, one missed update would be expected every ~430 days, and it is
# caught by the next change of that row. 16 digits cost ~4.5 bytes a row more under zstd.
CHANGE_DIGEST_CHARS = 8
# Hex digits of `calls.record_sha256` stored: the successor of the pinned 64-digit record
# digest is its first 16. It is `calls`' change detector and names the record's content in
# tests/pinned; 64 bits make a changed row whose digest stays the same 1 in 1.8e19 (at 10M
# changed rows a day, one in ~5e9 years), and a reader can still tell records apart by it
# (a day of 10M calls: ~3e-6 chance that two distinct records share one). 27 bytes a call
# fewer than 64 digits (35 -> 8 on bench/storage.py's day).
CALLS_RECORD_DIGEST_CHARS = 16


def record_digest_chars(name: str) -> int:
    """Hex digits of ``record_sha256`` that table ``name`` stores."""
    return CALLS_RECORD_DIGEST_CHARS if name == "calls" else CHANGE_DIGEST_CHARS


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
            calls = calls_with_ids(stored_scan("calls"))
    if name == "rot_checks":
        data = rot_checks_to_stored(data, calls)
    elif name in FROM_CALL:
        data = without_call_values(name, data, calls)
    if name in FROM_CALL:
        # which prefixes are unique: among the day's stored calls, and this run's not yet stored
        day_calls = [named_rows(name, *_stored_owners(stored_scan, call_rows)) if stored_scan is not None else None]
        if call_rows is not None:
            day_calls.append(pl.from_arrow(call_rows.select(["call_id", "occurred_date"])).lazy())
        existing = stored_scan(name) if stored_scan is not None else None
        data = short_call_ids(name, data, [c for c in day_calls if c is not None], existing)
    names = data.schema.names
    if name == "calls":
        data = stored_block_hashes(data)
        # derived from the values written, after redaction and with the block hashes as
        # stored: it always describes its row, and a row read back and written again keeps it
        keys = set_keys(pl.from_arrow(data.select(KEY_COLUMNS)))
        data = data.set_column(names.index(KEY_COLUMN), KEY_COLUMN, keys.to_arrow().cast(pa.string()))
        computed, recorded = data["request_sha256"], data["rendered_request_sha256"]
        matches = pc.fill_null(data["request_hash_matches"], False)
        same = pc.and_(matches, pc.fill_null(pc.equal(computed, recorded), False))
        stored = pc.if_else(same, pa.scalar(None, computed.type), computed)
        data = data.set_column(names.index("request_sha256"), "request_sha256", stored)
    if name == "spans":
        call_id, span_key = data["call_id"], data["span_key"]
        same = pc.fill_null(pc.equal(call_id, span_key), False)
        kept = pc.if_else(same, pa.scalar(SAME_AS_SPAN_KEY, call_id.type), call_id)
        data = data.set_column(names.index("call_id"), "call_id", kept)
    if name in DERIVED_KEY:
        column = DERIVED_KEY[name]
        key = data[column]
        derived = pa.array(
            _source_keys([None] * data.num_rows, *(data[c].to_pylist() for c in SOURCE_KEY_OF)), key.type
        )
        derivable = pc.fill_null(pc.equal(key, derived), False)
        data = data.set_column(names.index(column), column, pc.if_else(derivable, pa.scalar(None, key.type), key))
    if "record_sha256" in names:
        digest = pc.utf8_slice_codeunits(data["record_sha256"], 0, record_digest_chars(name))
        data = data.set_column(names.index("record_sha256"), "record_sha256", digest)
    if name in ROW_ORDER and data.num_rows > 1:
        data = data.sort_by([(column, "ascending") for column in ROW_ORDER[name]])
    return with_layout(name, data)


# a `calls` row's block hashes with each digest as stored (``BLOCK_DIGEST_CHARS``; a table
# written before kept all 64 digits): what every reader of `calls` gets
BLOCK_DIGESTS_READ = pl.col("block_hashes").list.eval(
    pl.element().struct.with_fields(pl.field("sha256").str.slice(0, BLOCK_DIGEST_CHARS))
)


def stored_block_hashes(calls: pa.Table) -> pa.Table:
    """``calls`` with each block hash cut to the digits stored (see the module docstring)."""
    if calls.num_rows == 0:
        return calls
    column = calls.schema.field("block_hashes")
    cut = pl.from_arrow(calls.select(["block_hashes"])).select(BLOCK_DIGESTS_READ).to_series()
    return calls.set_column(calls.schema.names.index("block_hashes"), column, cut.to_arrow().cast(column.type))


# `calls.call_id` and `spans.span_key` are sha256 of "source_format|trace_id|span_id"
# (record/rows.py, DESIGN.md) and are not stored where they are that (null): reading derives
# them again (``derived_key``), and a merge finds a stored row by these columns instead
# (``key_predicate``). Neither has Parquet statistics, so a filter on one prunes no file either way.
SOURCE_KEY_OF = ("source_format", "trace_id", "span_id")
DERIVED_KEY = {"calls": "call_id", "spans": "span_key"}


def _source_keys(keys: list, formats: list, trace_ids: list, span_ids: list) -> list[str | None]:
    return [
        k if k is not None else key_of(f, t, s) if f is not None and t is not None and s is not None else None
        for k, f, t, s in zip(keys, formats, trace_ids, span_ids, strict=True)
    ]


def derived_key(column: str) -> pl.Expr:
    """``column`` (``DERIVED_KEY``) as stored, or where null the key its row's source format,
    trace id and span id say."""
    fields = (column, *SOURCE_KEY_OF)
    return (
        pl.struct(fields)
        .map_batches(
            lambda rows: pl.Series(_source_keys(*(rows.struct.field(c).to_list() for c in fields)), dtype=pl.String),
            return_dtype=pl.String,
            is_elementwise=True,
        )
        .alias(column)
    )


def calls_with_ids(calls: pl.LazyFrame) -> pl.LazyFrame:
    """Stored ``calls`` (or rows as built: a no-op there) with every ``call_id``."""
    return calls.with_columns(derived_key("call_id"))


def key_predicate(name: str) -> str:
    """The SQL predicate by which a merge finds the stored row (``t``) of a new one (``s``):
    the table's key, or for a table of ``DERIVED_KEY`` the columns its key is derived from (a
    stored key, of a row whose key is not derived or of a table written before, must then be
    the same)."""
    if name not in DERIVED_KEY:
        return " AND ".join(f"t.{k} = s.{k}" for k in KEYS[name])
    key = DERIVED_KEY[name]
    same_source = " AND ".join(f"t.{k} = s.{k}" for k in SOURCE_KEY_OF)
    return f"{same_source} AND (t.{key} IS NULL OR s.{key} IS NULL OR t.{key} = s.{key})"


def change_digest(name: str, alias: str) -> str:
    """The SQL expression of ``alias``'s stored ``record_sha256`` that a merge compares with the
    new row's (``record_digest_chars`` digits): a table written with longer digests (64 in
    `calls`, 16 elsewhere, before they were cut) compares by their first digits, so an
    unchanged row is not rewritten only because its digest is stored longer."""
    return f"left({alias}.record_sha256, {record_digest_chars(name)})"


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


def from_stored(
    name: str,
    frame: pl.LazyFrame,
    stored_scan: Callable[[str], pl.LazyFrame | None],
    keep_stored_call_id: bool = False,
) -> pl.LazyFrame:
    """The rows of a stored table as the core built them (digests stay short).
    ``stored_scan`` scans another table as stored (None when it does not exist).
    ``keep_stored_call_id``: a table of ``short_call_ids`` also has its call id as stored
    (``STORED_CALL_ID``), which is what a delete by key has to name."""
    if name in LAYOUT_COLUMNS:
        frame = frame.drop(LAYOUT_COLUMNS[name], strict=False)
    if name == "calls":
        if KEY_COLUMN not in frame.collect_schema().names():  # a table written before the column
            frame = frame.with_columns(pl.lit(None, pl.String).alias(KEY_COLUMN))
        return frame.with_columns(
            computed_request_sha256(),
            derived_key("call_id"),
            BLOCK_DIGESTS_READ,
            # a table written before keeps all 64 digits: read as the digits stored now
            pl.col("record_sha256").str.slice(0, CALLS_RECORD_DIGEST_CHARS),
        )
    if name == "spans":
        calls = stored_scan("calls")
        return span_call_ids(frame) if calls is None else spans_with_calls(frame, calls)
    if name == "rot_checks":
        return rot_checks_with_calls(frame, stored_scan("calls"), keep_stored_call_id)
    if name in FROM_CALL:
        spans = stored_scan("spans") if name == "redaction_audit" else None
        return with_call_values(name, frame, stored_scan("calls"), keep_stored_call_id, spans)
    return frame


# `spans.call_id` as stored where it equals the span's own span_key (a call's llm span that
# says more than `calls` does): no call id is this string, and null keeps meaning "no call"
SAME_AS_SPAN_KEY = "="


def span_call_ids(spans: pl.LazyFrame) -> pl.LazyFrame:
    """Stored ``spans`` with the ``span_key`` storage left out (``derived_key``) and the
    ``call_id`` it wrote as ``SAME_AS_SPAN_KEY``."""
    call_id = pl.col("call_id")
    spans = spans.with_columns(derived_key("span_key"))
    return spans.with_columns(
        pl.when(call_id == SAME_AS_SPAN_KEY).then(pl.col("span_key")).otherwise(call_id).alias("call_id")
    )


def spans_with_calls(spans: pl.LazyFrame, calls: pl.LazyFrame) -> pl.LazyFrame:
    """Stored ``spans`` and the llm spans of ``calls`` that are not stored: the `spans` table as ingest built it."""
    spans = span_call_ids(spans.drop(LAYOUT_COLUMNS["spans"], strict=False))
    built = llm_spans(calls_with_ids(calls)).join(spans.select("span_key"), on="span_key", how="anti")
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


def with_call_values(
    name: str,
    frame: pl.LazyFrame,
    calls: pl.LazyFrame | None,
    keep_stored: bool = False,
    spans: pl.LazyFrame | None = None,
) -> pl.LazyFrame:
    """Stored rows of ``name`` with what storage left out taken from their call in ``calls``
    (as stored; None: no `calls` table, nothing to take): the call id in full
    (``resolved_call_ids``; ``keep_stored`` keeps the stored one beside it; `redaction_audit`'s
    rows of spans find theirs in ``spans``, as stored) and the values copied from the call."""
    if calls is None:
        return frame.with_columns(pl.col("call_id").alias(STORED_CALL_ID)) if keep_stored else frame
    calls = calls_with_ids(calls)
    frame = resolved_call_ids(frame, named_rows(name, calls, spans), keep_stored)
    copies = FROM_CALL[name]
    names = frame.collect_schema().names()
    joined = frame.join(_call_values(copies, calls, []), on=list(copies.keys), how="left", maintain_order="left")
    return joined.with_columns(
        pl.coalesce(pl.col(column), pl.col(f"{call_column}__call")).alias(column)
        for column, call_column in copies.columns
    ).select(names)


# Hex digits of `call_id` that `retention`, `rot_checks` and `redaction_audit` store where
# they name their call unambiguously (``short_call_ids``): 64 bits. A prefix is stored only
# where it is the prefix of that call alone among its day's calls when the row is written;
# reading finds the call by (occurred_date, prefix). What can still go wrong is a call that
# arrives later with the same 64-bit prefix on the same day, before the row's call is
# deleted or not: with n calls a day that is about n^2 / 2^65 pairs a day (10M calls a day:
# one in ~370,000 days); the row then reads its prefix as its call id instead of a
# wrong call (``resolved_call_ids``). 12 digits would save ~2.5 bytes a row more, but at 10M
# calls a day would collide most weeks.
SHORT_CALL_ID_CHARS = 16


def short_call_ids(name: str, data: pa.Table, calls: Sequence[pl.LazyFrame], existing: pl.LazyFrame | None) -> pa.Table:
    """``data`` of ``name`` with each ``call_id`` stored as its first ``SHORT_CALL_ID_CHARS``
    digits where that names the call alone: the call is in ``calls`` (as stored, and rows not
    yet stored) on the row's occurred_date and no other call of that day begins with the
    same digits, and ``existing`` (the table as stored) holds no row of the call with its
    id in full. A row whose call is not in ``calls`` keeps its id in full, unless the table
    already holds it by its prefix (the call was deleted since): a merge then finds it.
    ``calls`` are ``named_rows``: for `redaction_audit` the spans too, whose audit rows hold
    their span_key."""
    if data.num_rows == 0 or not calls:
        return data
    chars = SHORT_CALL_ID_CHARS
    rows = pl.from_arrow(data.select(["call_id", "occurred_date"])).with_columns(
        prefix=pl.col("call_id").str.slice(0, chars)
    )
    days = rows["occurred_date"].drop_nulls().unique().implode()
    prefixes = rows["prefix"].unique().implode()
    day_calls = (
        pl.concat([c.select("occurred_date", "call_id") for c in calls], how="vertical_relaxed")
        .filter(pl.col("occurred_date").is_in(days) & pl.col("call_id").str.slice(0, chars).is_in(prefixes))
        .unique()
        .with_columns(prefix=pl.col("call_id").str.slice(0, chars))
        .collect()
    )
    stored_keys = pl.DataFrame(schema={"occurred_date": pl.Date, "call_id": pl.String})
    if existing is not None:
        partition = PARTITIONS[name][0]
        merged_into = pc.unique(data[partition]).drop_null().to_pylist()
        stored_keys = (
            existing.filter(pl.col(partition).is_in(merged_into))
            .select("occurred_date", "call_id")
            .filter(pl.col("call_id").is_in(pl.concat([rows["call_id"], rows["prefix"]]).unique().implode()))
            .unique()
            .collect()
        )
    key = ["occurred_date", "prefix"]
    per_prefix = day_calls.group_by(key).agg(calls_with_prefix=pl.len())
    in_calls = day_calls.select("occurred_date", "call_id", in_calls=pl.lit(True))
    stored_full = stored_keys.select("occurred_date", "call_id", stored_full=pl.lit(True))
    stored_short = stored_keys.select("occurred_date", prefix="call_id", stored_short=pl.lit(True))
    ids_in_batch = rows.unique().group_by(key).agg(ids_in_batch=pl.len())
    decided = (
        rows.join(per_prefix, on=key, how="left", maintain_order="left")
        .join(in_calls, on=["occurred_date", "call_id"], how="left", maintain_order="left")
        .join(stored_full, on=["occurred_date", "call_id"], how="left", maintain_order="left")
        .join(stored_short, on=key, how="left", maintain_order="left")
        .join(ids_in_batch, on=key, how="left", maintain_order="left")
        .with_columns(pl.col("in_calls", "stored_full", "stored_short").fill_null(False))
        .select(
            pl.when(
                ~pl.col("stored_full")
                & (pl.col("calls_with_prefix").fill_null(0) - pl.col("in_calls").cast(pl.Int64) == 0)
                & (pl.col("ids_in_batch") == 1)
                & (pl.col("in_calls") | pl.col("stored_short"))
            )
            .then(pl.col("prefix"))
            .otherwise(pl.col("call_id"))
        )
        .to_series()
    )
    names = data.schema.names
    return data.set_column(
        names.index("call_id"), "call_id", decided.to_arrow().cast(data.schema.field("call_id").type)
    )


def _stored_owners(
    stored_scan: Callable[[str], pl.LazyFrame | None], call_rows: pa.Table | None
) -> tuple[pl.LazyFrame | None, pl.LazyFrame | None]:
    """The stored `calls` and `spans` a write checks its prefixes against: the whole day's for
    a stage, but for ingest's audit rows (``call_rows``: a shard's calls) only those of the
    hours its calls fall in, the files its own merges read: checking every hour of the day
    in every shard would cost each shard a sha256 per call of the day. A collision with a
    call of another hour is then left to reading, where a prefix two calls begin with
    names neither (``resolved_call_ids``): as rare as a later call colliding."""
    calls, spans = stored_scan("calls"), stored_scan("spans")
    if call_rows is None or call_rows.num_rows == 0:
        return calls, spans
    hours = pc.unique(pc.hour(call_rows["occurred_at"])).drop_null().to_pylist()
    return tuple(
        None
        if frame is None
        else frame.filter(pl.col(HOUR).is_in(hours))
        if HOUR in frame.collect_schema().names()
        else frame
        for frame in (calls, spans)
    )


def named_rows(name: str, calls: pl.LazyFrame | None, spans: pl.LazyFrame | None) -> pl.LazyFrame:
    """``(occurred_date, call_id)`` of every row a row of ``name`` can name by its call id: the
    calls (as stored), and for `redaction_audit` also the spans (its rows of spans that belong
    to no call hold their span_key)."""
    keys = [] if calls is None else [calls_with_ids(calls).select("occurred_date", "call_id")]
    if name == "redaction_audit" and spans is not None:
        keys.append(spans.with_columns(derived_key("span_key")).select("occurred_date", call_id=pl.col("span_key")))
    if not keys:
        return pl.LazyFrame(schema={"occurred_date": pl.Date, "call_id": pl.String})
    return pl.concat(keys, how="vertical_relaxed").unique()


# the column ``resolved_call_ids`` keeps the stored call id in when asked (the erasure deletes by it)
STORED_CALL_ID = "stored_call_id"


def resolved_call_ids(frame: pl.LazyFrame, calls: pl.LazyFrame, keep_stored: bool = False) -> pl.LazyFrame:
    """Stored rows of a table of ``short_call_ids`` with each call id in full: a prefix is
    replaced by the id of the one call of the row's day that begins with it (``calls``: the
    ``named_rows``). A prefix that
    no call or several calls of the day begin with (the call was deleted since, or a later
    call collides) stays as stored. With ``keep_stored`` the stored value is kept beside,
    as ``STORED_CALL_ID``."""
    chars = SHORT_CALL_ID_CHARS
    owners = (
        calls.select("occurred_date", "call_id")
        .unique()
        .filter(pl.col("call_id").str.len_chars() > chars)
        .with_columns(prefix=pl.col("call_id").str.slice(0, chars))
        .unique(subset=["occurred_date", "prefix"], keep="none")
        .select("occurred_date", pl.col("prefix").alias("call_id"), pl.col("call_id").alias("__full_call_id"))
    )
    names = frame.collect_schema().names()
    stored = [pl.col("call_id").alias(STORED_CALL_ID)] if keep_stored else []
    return (
        frame.join(owners, on=["occurred_date", "call_id"], how="left", maintain_order="left")
        .with_columns(*stored, pl.coalesce("__full_call_id", "call_id").alias("call_id"))
        .select(*names, *([STORED_CALL_ID] if keep_stored else []))
    )


# Hex digits kept of a `rot_checks.rerendered_sha256` that differs from the recorded hash (a
# rotted or impure call's; an equal one is not stored at all): nothing compares it again, it
# tells a reader that today's render hashed to other bytes, and which render (64 bits).
RERENDERED_DIGEST_CHARS = 16


def rot_checks_to_stored(data: pa.Table, calls: pl.LazyFrame | None) -> pa.Table:
    """``rot_checks`` rows as stored (see the module docstring); ``calls`` as stored, or None."""
    if data.num_rows == 0:
        return data
    names = data.schema.names
    recorded, rerendered = data["recorded_sha256"], data["rerendered_sha256"]
    same = pc.fill_null(pc.equal(rerendered, recorded), False)
    # a re-rendered hash that differs says that today's render is other bytes: its first digits say so
    differing = pc.utf8_slice_codeunits(rerendered, 0, RERENDERED_DIGEST_CHARS)
    stored = pc.if_else(
        same, pa.scalar(None, rerendered.type), pc.fill_null(differing, pa.scalar(NOT_RERENDERED, rerendered.type))
    )
    data = data.set_column(names.index("rerendered_sha256"), "rerendered_sha256", stored)
    return without_call_values("rot_checks", data, calls)


def rot_checks_with_calls(checks: pl.LazyFrame, calls: pl.LazyFrame | None, keep_stored: bool = False) -> pl.LazyFrame:
    """Stored ``rot_checks`` as the check wrote them: the call id in full, the call's values
    from ``calls`` where storage left them out, and the re-rendered hash where it equals the
    recorded one (``keep_stored``: see ``with_call_values``)."""
    checks = with_call_values("rot_checks", checks, calls, keep_stored)
    rerendered = pl.col("rerendered_sha256")
    return checks.with_columns(
        pl.when(rerendered.is_null())
        .then(pl.col("recorded_sha256"))
        .when(rerendered == NOT_RERENDERED)
        .then(pl.lit(None, pl.String))
        .otherwise(rerendered)
        .alias("rerendered_sha256")
    )
