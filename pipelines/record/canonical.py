"""The canonical request and its hashes (DESIGN.md, "Hashing spec").

The canonical request is the provider request body (Anthropic Messages shape)
with absent/None keys dropped, serialized as JSON with sorted keys, separators
``(",", ":")``, ``ensure_ascii=False``, encoded UTF-8. ``request_sha256`` is the
sha256 hex of those bytes. None is dropped at every depth of a JSON object (a
client library drops unset fields wherever they sit), never inside a list,
where position carries meaning.

Per-block hashes use the same canonical JSON of each block, so a rot check can
name which ingredient moved:

- ``model``: the request's ``model`` string;
- ``system``: the request's ``system`` (string or list of blocks);
- ``messages[i]``: each message, in order;
- ``tools``: the ``tools`` list;
- ``params``: every other top-level key (max_tokens, temperature, top_p,
  top_k, stop_sequences, tool_choice, thinking, ...) except ``metadata``;
- ``metadata``: the request's ``metadata`` (it carries per-user values);
- ``document:<doc_id>``: each retrieved document as ``{"doc_id", "text"}``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

REQUEST_BLOCKS = ("model", "system", "messages", "tools", "metadata")


def drop_none(value: Any) -> Any:
    """Remove None-valued keys from every JSON object inside ``value``."""
    # concrete types first: an isinstance check against an ABC costs ten times more
    if isinstance(value, dict):
        return {k: drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [drop_none(v) for v in value]
    if isinstance(value, Mapping):
        return {k: drop_none(v) for k, v in value.items() if v is not None}
    return value


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    return _dumps(drop_none(value))


def verbatim_json(value: Any) -> str:
    """JSON text of a value as the source had it (key order and nulls kept),
    for storage, not hashing."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str).decode()


def sha256_hex(data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def request_sha256(request: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical request bytes: the value capture writes as
    ``rendered_request_sha256``."""
    return sha256_hex(canonical_json(request))


def request_blocks(request: Mapping[str, Any]) -> dict[str, Any]:
    """Split a request into its named blocks (see module docstring)."""
    return _blocks(drop_none(request))


def _blocks(request: dict[str, Any]) -> dict[str, Any]:
    blocks: dict[str, Any] = {}
    if "model" in request:
        blocks["model"] = request["model"]
    if "system" in request:
        blocks["system"] = request["system"]
    for i, message in enumerate(request.get("messages") or []):
        blocks[f"messages[{i}]"] = message
    if "tools" in request:
        blocks["tools"] = request["tools"]
    params = {k: v for k, v in request.items() if k not in REQUEST_BLOCKS}
    if params:
        blocks["params"] = params
    if "metadata" in request:
        blocks["metadata"] = request["metadata"]
    return blocks


def document_block(doc_id: str, text: str | None) -> dict[str, Any]:
    return {"doc_id": doc_id, "text": text}


def block_hashes(
    request: Mapping[str, Any] | None,
    documents: Iterable[tuple[str, str | None]] = (),
    block_tokens: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """One ``{"block", "sha256", "tokens"}`` row per request block and retrieved document."""
    return _block_rows(drop_none(request) if request else None, documents, block_tokens)


def block_hashes_from_json(
    request_json: str | None,
    documents: Iterable[tuple[str, str | None]] = (),
    block_tokens: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """``block_hashes`` of a request already in canonical JSON (a calls row's
    ``request_json``): parsing it back is cheaper than cleaning the dict again."""
    return _block_rows(json.loads(request_json) if request_json else None, documents, block_tokens)


def _block_rows(
    request: dict[str, Any] | None,
    documents: Iterable[tuple[str, str | None]],
    block_tokens: Mapping[str, int] | None,
) -> list[dict[str, Any]]:
    tokens = block_tokens or {}
    rows = []
    if request:
        for name, block in _blocks(request).items():
            rows.append({"block": name, "sha256": sha256_hex(_dumps(block)), "tokens": tokens.get(name)})
    for doc_id, text in documents:
        if text is None:
            continue
        name = f"document:{doc_id}"
        rows.append(
            {"block": name, "sha256": sha256_hex(_dumps(document_block(doc_id, text))), "tokens": tokens.get(name)}
        )
    return rows


def call_id(source_format: str, trace_id: str, span_id: str) -> str:
    """Stable identity of a call: the same source record always gets the same id."""
    return sha256_hex(f"{source_format}|{trace_id}|{span_id}")


def record_sha256(row: Mapping[str, Any], ignore: Iterable[str]) -> str:
    """Content hash of a row, ignoring bookkeeping columns (ingested_at, etag...).
    The warehouse merge only rewrites a row when this changes."""
    skip = set(ignore)
    content = {k: v for k, v in row.items() if k not in skip}
    # an internal fingerprint, not the hashing spec: orjson is several times faster
    return hashlib.sha256(
        orjson.dumps(content, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str)
    ).hexdigest()
