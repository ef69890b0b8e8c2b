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
- ``record_sha256`` is the merge's change detector. In ``calls`` it is the
  record's pinned identity (tests/pinned) and keeps all 64 hex digits; in every
  other table only a change has to be noticed, so the first 16 (64 bits) are kept.

Measured on the demo day by bench/storage.py: with zstd, a 64-digit hex digest
costs ~39 bytes a row, about as much as all of a call's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

# hex digits of record_sha256 kept outside `calls`: 64 bits make a missed change (two
# versions of one row with the same digest) a 1-in-10^19 event per update
CHANGE_DIGEST_CHARS = 16
# tables whose record_sha256 is more than a change detector
FULL_RECORD_DIGEST = frozenset({"calls"})


def computed_request_sha256() -> pl.Expr:
    """The hash of the call's request body as stored (``request_sha256``), whichever way it is stored."""
    same_as_recorded = pl.when(pl.col("request_hash_matches")).then(pl.col("rendered_request_sha256"))
    return pl.coalesce(pl.col("request_sha256"), same_as_recorded).alias("request_sha256")


def request_sha256_of(call: Mapping[str, Any]) -> str | None:
    """``computed_request_sha256`` for one row as a dict (a built row or a stored one)."""
    if call.get("request_sha256"):
        return call["request_sha256"]
    return call.get("rendered_request_sha256") if call.get("request_hash_matches") else None


def to_stored(name: str, data: pa.Table) -> pa.Table:
    """``data`` (already of the table's schema) as the table stores it."""
    names = data.schema.names
    if name == "calls":
        computed, recorded = data["request_sha256"], data["rendered_request_sha256"]
        matches = pc.fill_null(data["request_hash_matches"], False)
        same = pc.and_(matches, pc.fill_null(pc.equal(computed, recorded), False))
        stored = pc.if_else(same, pa.scalar(None, computed.type), computed)
        data = data.set_column(names.index("request_sha256"), "request_sha256", stored)
    if "record_sha256" in names and name not in FULL_RECORD_DIGEST:
        digest = pc.utf8_slice_codeunits(data["record_sha256"], 0, CHANGE_DIGEST_CHARS)
        data = data.set_column(names.index("record_sha256"), "record_sha256", digest)
    return data


def from_stored(name: str, frame: pl.LazyFrame) -> pl.LazyFrame:
    """The rows of a stored table as the core built them (digests stay short)."""
    if name == "calls":
        return frame.with_columns(computed_request_sha256())
    return frame
