"""Per-block request hashes, computed from the raw request before redaction.

``pipelines.record.canonical.block_hashes`` hashes every block with plain
sha256. A plain hash of a short block that holds a CPF can be reversed by
hashing every candidate CPF, so the blocks that may hold personal data
(``system``, ``messages[i]``, ``metadata`` and retrieved documents not marked
public) are re-hashed here with HMAC-SHA256 under ``TRACELAKE_HASH_KEY``.
Each row says which algorithm it used, and ``block_sha256`` recomputes the
same value for a re-rendered block, so the rot check can still compare
(``canonical.same_block_digest``).

The canonical bytes and the digests come from ``pipelines.record.canonical``
(the one implementation of the hashing spec); this module only decides which
block is keyed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pipelines.record import canonical
from pipelines.record.canonical import ALGORITHMS, DOCUMENT_PREFIX, HMAC_SHA256, SHA256
from pipelines.redact.keys import KeyRing

__all__ = ["ALGORITHMS", "DOCUMENT_PREFIX", "HMAC_SHA256", "SHA256", "block_sha256", "may_hold_pii", "raw_block_hashes"]


def may_hold_pii(block: str, is_public_document: Callable[[str], bool] = lambda doc_id: False) -> bool:
    if block.startswith(DOCUMENT_PREFIX):
        return not is_public_document(block[len(DOCUMENT_PREFIX) :])
    return block in ("system", "metadata") or block.startswith("messages[")


def block_sha256(block: Any, algorithm: str, keys: KeyRing) -> str:
    """The hash of one block's canonical JSON under ``algorithm``: what a
    ``block_hashes`` row with that algorithm holds. A null algorithm (rows
    written before redaction existed) is plain sha256. For a retrieved
    document pass ``canonical.document_block(doc_id, text)``."""
    return canonical.digest(canonical.canonical_bytes(block), algorithm, keys.block_hash_key)


def raw_block_hashes(
    request_json: str | None,
    documents: Sequence[Mapping[str, Any]],
    existing: Sequence[Mapping[str, Any]] | None,
    keys: KeyRing,
    is_public_document: Callable[[str], bool],
) -> list[dict[str, Any]] | None:
    """Block hash rows of a raw call, keyed where a block may hold personal data.

    Token counts are carried over from ``existing`` by block name. Blocks
    that cannot be recomputed (no request captured) keep their existing row.
    """
    tokens = {row["block"]: row.get("tokens") for row in existing or ()}
    rows: dict[str, dict[str, Any]] = {}
    for row in existing or ():
        rows[row["block"]] = {**row, "algorithm": row.get("algorithm") or SHA256}
    # request_json is canonical (no None in any object), so its blocks are too
    request = canonical.parse_canonical(request_json)
    if request is not None and not isinstance(request, dict):
        raise ValueError("request_json is not a JSON object")
    docs = [(d["doc_id"], d["text"]) for d in documents if d.get("text") is not None and d.get("doc_id") is not None]
    plain = canonical.request_plain(request_json)
    for name, data in canonical.canonical_blocks(request, docs, plain=plain).items():
        algorithm = HMAC_SHA256 if may_hold_pii(name, is_public_document) else SHA256
        rows[name] = {
            "block": name,
            "sha256": canonical.digest(data, algorithm, keys.block_hash_key),
            "tokens": tokens.get(name),
            "algorithm": algorithm,
        }
    if not rows and existing is None:
        return None
    return list(rows.values())
