"""A call's ingredient-set key (``calls.rot_set_key``): what makes two calls one
ingredient set for the rot check, as a short hash stored with the call.

Two calls with the same key share template version, variables, route, model
alias, document ids and ranks, and the recorded hashes of the blocks those make
(model, params, tools, each document; the document blocks stand for the
recorded texts), and either both or neither record a falsy ``metadata`` value
(which today's request leaves out). ``pipelines.rot.grouped`` gives such calls
one verdict per system prompt. The key is null where a call cannot share a
verdict on its stored values alone: redacted, or missing a template version,
block hashes, a request, a top-level ``messages`` list or a document's hash.

The warehouse computes it on every write of `calls` (``pipelines.record.derived``),
from the values stored, after redaction, so it always describes the row it is in.
The key's bytes are the JSON of those fields with a version tag (``KEY_VERSION``); the
key is 16 hex digits of their sha256: a day with 10k distinct sets has a chance of
~3e-12 of two sharing a key.
"""

from __future__ import annotations

import hashlib

import polars as pl

KEY_COLUMN = "rot_set_key"
KEY_VERSION = "rot-set-1"
KEY_DIGITS = 16
# the calls columns the key is made of
KEY_COLUMNS = (
    "template_id",
    "template_version",
    "template_variables_json",
    "service",
    "model_alias",
    "retrieval",
    "block_hashes",
    "request_json",
    "flags",
)
# pipelines.redact.redactor.REDACTED_FLAG (not imported from there, which loads presidio)
_REDACTED_FLAG = "redacted"
_KEY_BLOCKS = ("model", "params", "tools")
# What json_path_match gives for the falsy metadata values rerender_request leaves out.
_FALSY_JSON = ("{}", "[]", "", "0", "0.0", "-0.0", "false")
_BLOCK = pl.element().struct.field("block")


def _documents() -> pl.Expr:
    return pl.col("retrieval").struct.field("documents")


def _fields() -> dict[str, pl.Expr]:
    """The set's list fields: the documents (ids and ranks as stored) and the recorded
    hashes of the blocks the set decides, one list of structs each (one ``list.eval``
    apiece: a list per field costs five times as much to build)."""
    keyed = _BLOCK.is_in(list(_KEY_BLOCKS)) | _BLOCK.str.starts_with("document:")
    sha, algorithm = pl.element().struct.field("sha256"), pl.element().struct.field("algorithm")
    return {
        "docs": _documents().list.eval(
            pl.struct(pl.element().struct.field("doc_id"), pl.element().struct.field("rank"))
        ),
        "blocks": pl.col("block_hashes").list.eval(pl.struct(_BLOCK, sha, algorithm).filter(keyed)),
    }


def _groupable() -> pl.Expr:
    """Stored values that let a call share its set's verdict (see the module docstring);
    every stored document has a recorded block (counted as the check's dict counts them)."""
    hashed = pl.col("block_hashes").list.eval(_BLOCK.str.starts_with("document:")).list.sum()
    return (
        ~pl.col("flags").list.contains(_REDACTED_FLAG).fill_null(False)
        & pl.col("block_hashes").is_not_null()
        & pl.col("request_json").is_not_null()
        & pl.col("template_id").is_not_null()
        & pl.col("template_version").is_not_null()
        # a top-level "messages" key, which the re-rendered request always has
        & pl.col("request_json").str.contains('"messages":[', literal=True)
        & (hashed == _documents().list.len().fill_null(0))
    )


def metadata_dropped(request_json: pl.Series) -> pl.Series:
    """Does each request record a falsy ``metadata`` value (which ``rerender_request``
    leaves out of today's request)? Parsed only where a top-level metadata key can be."""
    maybe = request_json.str.contains(',"metadata":', literal=True).fill_null(False)
    at = maybe.arg_true()
    dropped = pl.Series(values=[False] * len(request_json), dtype=pl.Boolean)
    if len(at):
        values = request_json.gather(at).str.json_path_match("$.metadata")
        dropped = dropped.scatter(at, values.is_in(list(_FALSY_JSON)).fill_null(False))
    return dropped.alias("metadata_dropped")


def set_keys(calls: pl.DataFrame) -> pl.Series:
    """``rot_set_key`` of each call (``KEY_COLUMNS`` are read), in order; null where the
    call cannot share a verdict."""
    fields = [*KEY_COLUMNS[:5], "docs", "blocks", "metadata_dropped"]
    rows = (
        calls.select(*KEY_COLUMNS[:5], **_fields(), _ok=_groupable())
        .with_columns(metadata_dropped(calls["request_json"]))
        .with_row_index("_at")
        .filter(pl.col("_ok"))
    )
    keys = pl.Series(KEY_COLUMN, [None] * calls.height, dtype=pl.String)
    if rows.is_empty():
        return keys
    # the key's bytes are made once per distinct set (polars groups by the list columns)
    sets = rows.group_by(fields).agg("_at")
    text = sets.select(pl.struct(pl.lit(KEY_VERSION).alias("v"), *fields).struct.json_encode()).to_series()
    digests = [hashlib.sha256(t.encode()).hexdigest()[:KEY_DIGITS] for t in text.to_list()]
    at = sets.select(pl.col("_at"), key=pl.Series(digests, dtype=pl.String)).explode("_at")
    return keys.scatter(at["_at"], at["key"])
