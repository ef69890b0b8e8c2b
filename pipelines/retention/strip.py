"""What the sweep removes from a call in the ``ingredients`` tier, and what it keeps.

Removed (set to null): every piece of text a person, a model, a tool or a
document wrote, and anything whose content tracelake cannot vouch for:

- ``system_text`` (the rendered system prompt; it re-renders from the template
  id, version and variables, and the retrieved documents' ids, which stay),
- ``request_json`` (the request body; ``request_sha256`` and ``block_hashes`` stay),
- message and output-message parts: ``text``, ``arguments_json``,
  ``content_json``, ``native_json`` (role, name, part type, tool name, tool
  call id and is_error stay, so the shape of the conversation is still known),
- ``output_text``, ``retrieval.query_text``, every ``retrieval.documents[].text``
  (doc_id, rank, score, text_sha256 and tokens stay),
- ``tool_executions[].arguments_json`` and ``result_json`` (name, ids,
  is_error and timings stay),
- ``feedback[].comment`` (the free text; the rating stays),
- ``extra_json`` (whatever a source sent that has no column: unknown content).

Kept: identity, time, service, segment, tags, template id / version /
label / variables, model, params, tool definitions, usage, outcome (status,
error type and message, feedback ratings, eval score, escalated, guardrail,
flags), every hash, and the capture-quality columns. ``record_sha256`` is
left as it was: it still names the record as ingested, so a re-ingest of the
same object does not bring the text back.

Spans of swept traces keep only the ``attributes_json`` keys the policy lists
(outcome, tool name, model, token counts, ...).
"""

from __future__ import annotations

import json

import polars as pl

NULL_TEXT = pl.lit(None, dtype=pl.String)
PART_TEXT = ("text", "arguments_json", "content_json", "native_json")


def _if_present(column: str, stripped: pl.Expr) -> pl.Expr:
    # struct.with_fields on a null struct yields a struct of nulls; keep null as null
    return pl.when(pl.col(column).is_not_null()).then(stripped).otherwise(pl.col(column)).alias(column)


def _messages(column: str) -> pl.Expr:
    part = pl.element().struct.with_fields(**{name: NULL_TEXT for name in PART_TEXT})
    message = pl.element().struct.with_fields(pl.field("parts").list.eval(part))
    return _if_present(column, pl.col(column).list.eval(message))


def strip_calls(calls: pl.DataFrame) -> pl.DataFrame:
    """``calls`` rows without their full text (see the module docstring)."""
    document = pl.element().struct.with_fields(text=NULL_TEXT)
    retrieval = pl.col("retrieval").struct.with_fields(
        query_text=NULL_TEXT, documents=pl.field("documents").list.eval(document)
    )
    tool_execution = pl.element().struct.with_fields(arguments_json=NULL_TEXT, result_json=NULL_TEXT)
    feedback = pl.element().struct.with_fields(comment=NULL_TEXT)
    return calls.with_columns(
        NULL_TEXT.alias("system_text"),
        NULL_TEXT.alias("request_json"),
        NULL_TEXT.alias("output_text"),
        NULL_TEXT.alias("extra_json"),
        _messages("messages"),
        _messages("output_messages"),
        _if_present("retrieval", retrieval),
        _if_present("tool_executions", pl.col("tool_executions").list.eval(tool_execution)),
        _if_present("feedback", pl.col("feedback").list.eval(feedback)),
    )


def _any_field(column: str, fields: tuple[str, ...]) -> pl.Expr:
    """True when any struct in the list column has one of ``fields`` set."""
    present = pl.any_horizontal([pl.element().struct.field(f).is_not_null() for f in fields])
    return pl.col(column).list.eval(present).list.any().fill_null(False)


def _any_part_text(column: str) -> pl.Expr:
    part = pl.any_horizontal([pl.element().struct.field(f).is_not_null() for f in PART_TEXT])
    message = pl.element().struct.field("parts").list.eval(part).list.any().fill_null(False)
    return pl.col(column).list.eval(message).list.any().fill_null(False)


def has_full_text() -> pl.Expr:
    """True for calls that still hold text ``strip_calls`` would remove."""
    documents = pl.col("retrieval").struct.field("documents")
    doc_text = documents.list.eval(pl.element().struct.field("text").is_not_null()).list.any().fill_null(False)
    return pl.any_horizontal(
        pl.col("system_text").is_not_null(),
        pl.col("request_json").is_not_null(),
        pl.col("output_text").is_not_null(),
        pl.col("extra_json").is_not_null(),
        pl.col("retrieval").struct.field("query_text").is_not_null().fill_null(False),
        doc_text,
        _any_part_text("messages"),
        _any_part_text("output_messages"),
        _any_field("tool_executions", ("arguments_json", "result_json")),
        _any_field("feedback", ("comment",)),
    )


def _kept_attributes(text: str | None, keep: frozenset[str]) -> str | None:
    if text is None:
        return None
    try:
        attributes = json.loads(text)
    except ValueError:
        return None  # not JSON: nothing in it can be vouched for
    if not isinstance(attributes, dict):
        return None
    kept = {k: v for k, v in attributes.items() if k in keep}
    return json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False) if kept else None


def strip_spans(spans: pl.DataFrame, keep_attributes: list[str]) -> pl.DataFrame:
    """The spans whose ``attributes_json`` changes when cut down to
    ``keep_attributes``, with it cut down; spans that would not change are left out."""
    keep = frozenset(keep_attributes)
    stripped = pl.Series("stripped", [_kept_attributes(t, keep) for t in spans["attributes_json"]], dtype=pl.String)
    changed = spans.with_columns(stripped).filter(pl.col("stripped").ne_missing(pl.col("attributes_json")))
    return changed.with_columns(pl.col("stripped").alias("attributes_json")).drop("stripped")
