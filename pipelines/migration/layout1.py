"""Reading a table stored in layout 1 (tracelake before table layouts were recorded), as
the rows its writer built. Only ``pipelines.migration.rewrite`` uses this, to move a
warehouse to the current layout; nothing else reads layout 1.

Layout 1 left out what another column already said, and cut digests short:

- ``calls.call_id`` and ``spans.span_key`` were null where they were
  sha256("source_format|trace_id|span_id") (always, for rows ingest built);
- ``spans`` held no ``llm_call`` span that its call already said (they are built from
  ``calls``), and a stored call's span held ``"="`` as its ``call_id``;
- ``calls.request_sha256`` was null where it equalled ``rendered_request_sha256`` and
  ``request_hash_matches`` was true;
- ``rot_checks``, ``retention`` and ``redaction_audit`` named their call by the first 16
  digits of its id where that named it alone on its day, and left out the ``trace_id``
  (and ``rot_checks.recorded_sha256``) that their call said;
- ``rot_checks.rerendered_sha256`` was null where it equalled the recorded hash, ``""``
  where nothing was re-rendered, and otherwise its first 16 digits;
- ``redaction_audit.call_id`` held a span's key for a span outside any call;
- ``record_sha256`` kept 16 digits in `calls` and 8 elsewhere, and block hashes 16.

What was cut short cannot be read back: block hashes and the re-rendered hashes of rotted
calls stay the digits stored, and a side-table row whose call was deleted since keeps the
16-digit prefix it was stored under (``rewrite.py`` counts those).
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from pipelines.record.canonical import call_id as key_of
from pipelines.record.schema import SPANS

SOURCE_KEY_OF = ("source_format", "trace_id", "span_id")
SAME_AS_SPAN_KEY = "="
NOT_RERENDERED = ""
SHORT_CALL_ID_CHARS = 16
# the columns layout 1 copied from a row's call: (column, calls column); the call found by these keys
FROM_CALL: dict[str, tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {
    "rot_checks": ((("recorded_sha256", "rendered_request_sha256"), ("trace_id", "trace_id")), ("call_id",)),
    "retention": ((("trace_id", "trace_id"),), ("call_id", "occurred_date")),
    "redaction_audit": ((("trace_id", "trace_id"),), ("call_id", "occurred_date")),
}
_SPAN_TYPES = dict(pl.from_arrow(SPANS.empty_table()).schema)


def _source_keys(keys: list, formats: list, trace_ids: list, span_ids: list) -> list[str | None]:
    return [
        k if k is not None else key_of(f, t, s) if f is not None and t is not None and s is not None else None
        for k, f, t, s in zip(keys, formats, trace_ids, span_ids, strict=True)
    ]


def derived_key(column: str) -> pl.Expr:
    """``column`` as stored, or where null the key its row's source format, trace and span id say."""
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
    return calls.with_columns(derived_key("call_id"))


def llm_spans(calls: pl.LazyFrame) -> pl.LazyFrame:
    """The `spans` row of each call, as ingest built it (``record.rows.span_for_call``)."""
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
        record_sha256=pl.col("record_sha256"),
        kind=pl.lit("llm_call"),
        name=pl.concat_str(pl.lit("chat "), pl.col("request_model").fill_null("")).str.strip_chars(),
        step_index=null,
        occurred_at="occurred_at",
        ended_at="ended_at",
        occurred_date="occurred_date",
        occurred_hour=pl.col("occurred_at").dt.hour().cast(pl.Int32),
        duration_ms="latency_ms",
        status="status",
        tool_name=null,
        input_tokens=usage.field("input_tokens"),
        output_tokens=usage.field("output_tokens"),
        cost_usd=usage.field("cost_usd"),
        attributes_json=null,
    ).cast(_SPAN_TYPES)


def spans_with_calls(spans: pl.LazyFrame, calls: pl.LazyFrame) -> pl.LazyFrame:
    """Stored spans (keys and call ids back) and the llm spans of ``calls`` that were not stored."""
    call_id = pl.col("call_id")
    spans = spans.with_columns(derived_key("span_key"))
    spans = spans.with_columns(
        pl.when(call_id == SAME_AS_SPAN_KEY).then(pl.col("span_key")).otherwise(call_id).alias("call_id")
    )
    if "occurred_hour" not in spans.collect_schema().names():
        spans = spans.with_columns(occurred_hour=pl.col("occurred_at").dt.hour().cast(pl.Int32))
    built = llm_spans(calls_with_ids(calls)).join(spans.select("span_key"), on="span_key", how="anti")
    return pl.concat([spans, built.select(spans.collect_schema().names())], how="vertical_relaxed")


def resolved_call_ids(frame: pl.LazyFrame, owners: pl.LazyFrame) -> pl.LazyFrame:
    """Each stored 16-digit prefix replaced by the id of the one call (``owners``: its
    day's ``(occurred_date, call_id)``) that begins with it; a prefix no call or several
    calls begin with stays as stored."""
    chars = SHORT_CALL_ID_CHARS
    full = (
        owners.unique()
        .filter(pl.col("call_id").str.len_chars() > chars)
        .with_columns(prefix=pl.col("call_id").str.slice(0, chars))
        .unique(subset=["occurred_date", "prefix"], keep="none")
        .select("occurred_date", pl.col("prefix").alias("call_id"), pl.col("call_id").alias("__full"))
    )
    names = frame.collect_schema().names()
    joined = frame.join(full, on=["occurred_date", "call_id"], how="left", maintain_order="left")
    return joined.with_columns(pl.coalesce("__full", "call_id").alias("call_id")).select(names)


def with_call_values(
    name: str, frame: pl.LazyFrame, calls: pl.LazyFrame, spans: pl.LazyFrame | None = None
) -> pl.LazyFrame:
    """Rows of ``name`` with their call id in full and the values they copied from the call back."""
    calls = calls_with_ids(calls)
    owners = [calls.select("occurred_date", "call_id")]
    if name == "redaction_audit" and spans is not None:
        owners.append(spans.with_columns(derived_key("span_key")).select("occurred_date", call_id=pl.col("span_key")))
    frame = resolved_call_ids(frame, pl.concat(owners, how="vertical_relaxed"))
    copies, keys = FROM_CALL[name]
    names = frame.collect_schema().names()
    values = calls.select(*keys, *(pl.col(c).alias(f"{c}__call") for _, c in copies))
    joined = frame.join(values.unique(subset=list(keys)), on=list(keys), how="left", maintain_order="left")
    return joined.with_columns(
        pl.coalesce(pl.col(column), pl.col(f"{call_column}__call")).alias(column) for column, call_column in copies
    ).select(names)


def read(name: str, frame: pl.LazyFrame, stored: Callable[[str], pl.LazyFrame | None]) -> pl.LazyFrame:
    """The rows of layout-1 table ``name`` (``frame``) as its writer built them.
    ``stored(other)`` scans another table of the same warehouse (None: it does not exist)."""
    calls = stored("calls")
    if name == "calls":
        requested = pl.when(pl.col("request_hash_matches")).then(pl.col("rendered_request_sha256"))
        return frame.with_columns(derived_key("call_id"), pl.coalesce(pl.col("request_sha256"), requested))
    if name == "spans":
        return frame if calls is None else spans_with_calls(frame, calls)
    if name in FROM_CALL:
        if calls is not None:
            frame = with_call_values(name, frame, calls, stored("spans") if name == "redaction_audit" else None)
        if name == "rot_checks":
            rerendered = pl.col("rerendered_sha256")
            frame = frame.with_columns(
                pl.when(rerendered.is_null())
                .then(pl.col("recorded_sha256"))
                .when(rerendered == NOT_RERENDERED)
                .then(pl.lit(None, pl.String))
                .otherwise(rerendered)
                .alias("rerendered_sha256")
            )
    return frame
