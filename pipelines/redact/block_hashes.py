"""Per-block request hashes, computed from the raw request before redaction.

``pipelines.record.canonical.block_hashes`` hashes every block with plain
sha256. A plain hash of a short block that holds a CPF can be reversed by
hashing every candidate CPF, so the blocks that may hold personal data
(``system``, ``messages[i]``, ``metadata`` and retrieved documents not marked
public) are re-hashed here with HMAC-SHA256 under ``TRACELAKE_HASH_KEY``.
Each row says which algorithm it used, and ``block_sha256`` recomputes the
same value for a re-rendered block, so the rot check can still compare.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pipelines.record import canonical
from pipelines.redact.keys import KeyRing

SHA256 = "sha256"
HMAC_SHA256 = "hmac-sha256"
ALGORITHMS = (SHA256, HMAC_SHA256)
DOCUMENT_PREFIX = "document:"


def may_hold_pii(block: str, is_public_document: Callable[[str], bool] = lambda doc_id: False) -> bool:
    if block.startswith(DOCUMENT_PREFIX):
        return not is_public_document(block[len(DOCUMENT_PREFIX) :])
    return block in ("system", "metadata") or block.startswith("messages[")


def block_sha256(block: Any, algorithm: str, keys: KeyRing) -> str:
    """The hash of one block's canonical JSON under ``algorithm``: what a
    ``block_hashes`` row with that algorithm holds. A null algorithm (rows
    written before redaction existed) is plain sha256. For a retrieved
    document pass ``canonical.document_block(doc_id, text)``."""
    return _digest(canonical.canonical_json(block).encode("utf-8"), algorithm, keys)


def _digest(data: bytes, algorithm: str | None, keys: KeyRing) -> str:
    if algorithm in (SHA256, None):
        return hashlib.sha256(data).hexdigest()
    if algorithm == HMAC_SHA256:
        return hmac.new(keys.block_hash_key(), data, hashlib.sha256).hexdigest()
    raise ValueError(f"unknown block hash algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")


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
    blocks: dict[str, Any] = {}
    if request_json:
        # request_blocks drops None values itself: each block is already canonical but for its encoding
        blocks.update(canonical.request_blocks(json.loads(request_json)))
    for doc in documents:
        if doc.get("text") is not None and doc.get("doc_id") is not None:
            blocks[DOCUMENT_PREFIX + doc["doc_id"]] = canonical.document_block(doc["doc_id"], doc["text"])
    for name, block in blocks.items():
        algorithm = HMAC_SHA256 if may_hold_pii(name, is_public_document) else SHA256
        encoded = json.dumps(block, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        rows[name] = {
            "block": name,
            "sha256": _digest(encoded, algorithm, keys),
            "tokens": tokens.get(name),
            "algorithm": algorithm,
        }
    if not rows and existing is None:
        return None
    return list(rows.values())
