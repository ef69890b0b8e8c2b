"""The canonical request and its hashes (docs/architecture.md, "The hashing spec").

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

A block hash only tells which ingredient moved, never proves the request (that is
``request_sha256``). It is stored in full; a table migrated from layout 1 keeps the first
``LAYOUT1_BLOCK_DIGEST_CHARS`` digits it stored, so a recorded and a re-rendered hash are
compared by the digits both have (``same_block_digest``).

This is the one module that implements the spec: the redactor's keyed
(HMAC) block hashes take their bytes and digests from here too.

Speed: the canonical bytes come from orjson whenever its output is provably
the spec's (``canonical_bytes``); where it could differ (a float below 1e-4 or
in exponent form, an int over 64 bits, a non-string key, a value orjson would
write differently or refuse, a None anywhere) the spec serializer, stdlib
``json.dumps`` of the None-free value, writes them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

REQUEST_BLOCKS = ("model", "system", "messages", "tools", "metadata")
SHA256 = "sha256"
HMAC_SHA256 = "hmac-sha256"
ALGORITHMS = (SHA256, HMAC_SHA256)
DOCUMENT_PREFIX = "document:"

# orjson writes floats below 1e-4 as 0.0000..., the spec (Python's repr) as
# 1e-05; exponent forms are left to the spec too (``_exponent_number``), so no
# float rule is guessed. A number starts the text or follows ':', ',' or '[';
# in a string this is only a false alarm, which costs the slow path, never a wrong byte.
_SPEC_ONLY_NUMBER = re.compile(rb"(?:^|[:,\[])-?0\.0000")
# orjson natively writes dates, dataclasses and the like the spec refuses; with
# these options they reach ``default``, which refuses too (and the spec decides)
_ORJSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _refuse(value: Any) -> Any:
    raise TypeError


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


def spec_dumps(value: Any) -> str:
    """The spec's serializer, for a value already None-free: the reference the fast path must equal."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _fast(value: Any) -> bytes | None:
    """orjson's bytes of ``value`` when they are certainly the spec's, else None.

    ``null`` anywhere means a None (the spec drops it from objects) or a
    NaN/Infinity (orjson writes null, the spec NaN): the spec path decides.
    Ints over 64 bits and non-string keys make orjson raise.
    """
    try:
        data = orjson.dumps(value, default=_refuse, option=_ORJSON_OPTIONS)
    except (TypeError, orjson.JSONEncodeError):
        return None
    return data if _spec_safe(data) else None


def _spec_safe(data: bytes) -> bool:
    """Whether orjson's bytes ``data`` are the spec's bytes of the same value: no
    null (a None, or a NaN orjson wrote as null) and no float the two write differently."""
    if b"null" in data:
        return False
    if b"0.0000" in data and _SPEC_ONLY_NUMBER.search(data):
        return False
    # the substring tests first: most texts hold neither, and a call costs more than a scan
    if b"e-" in data and _exponent_number(data, b"e-"):
        return False
    return not (b"e+" in data and _exponent_number(data, b"e+"))


_NUMBER_BYTES = frozenset(b"0123456789.")
_BEFORE_NUMBER = frozenset(b":,[")


def _exponent_number(data: bytes, marker: bytes) -> bool:
    """Whether ``marker`` (``e-`` or ``e+``) ends the mantissa of a JSON number
    in ``data``: digits (and a dot) back to an optional sign and then the
    start, ``:``, ``,`` or ``[``. A substring scan, then a few bytes looked at
    per hit (ids like UUIDs hold ``e-`` often; a regex over the text costs more)."""
    i = data.find(marker)
    while i != -1:
        j = i
        while j > 0 and data[j - 1] in _NUMBER_BYTES:
            j -= 1
        if j < i:
            if j > 0 and data[j - 1] == 0x2D:  # a minus sign
                j -= 1
            if j == 0 or data[j - 1] in _BEFORE_NUMBER:
                return True
        i = data.find(marker, i + 2)
    return False


def _canonical(value: Any) -> tuple[bytes, Any]:
    """(the canonical JSON bytes of ``value``, the None-free value they are orjson's
    bytes of, or None where the spec's serializer wrote them)."""
    data = _fast(value)
    if data is not None:
        return data, value
    clean = drop_none(value)
    data = _fast(clean)
    if data is not None:
        return data, clean
    return spec_dumps(clean).encode("utf-8"), None


def canonical_bytes(value: Any) -> bytes:
    """The canonical JSON bytes of ``value`` (None dropped from objects at every depth)."""
    return _canonical(value)[0]


def canonical_request(value: Any) -> tuple[str, Any]:
    """(``canonical_json(value)``, the None-free value those bytes are orjson's
    of, as they are, or None where the spec's serializer wrote them): a caller
    that kept it can take its blocks from it instead of parsing the text back."""
    data, plain = _canonical(value)
    return data.decode("utf-8"), plain


def canonical_json(value: Any) -> str:
    return canonical_bytes(value).decode("utf-8")


def verbatim_json(value: Any) -> str:
    """JSON text of a value as the source had it (key order and nulls kept),
    for storage, not hashing."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str).decode()


def sha256_hex(data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def digest(data: bytes, algorithm: str | None, key: Callable[[], bytes]) -> str:
    """The hex digest of canonical bytes under ``algorithm``: plain sha256 (also
    for a null algorithm, rows written before keyed hashes existed) or
    HMAC-SHA256 under the key ``key()`` returns (asked only when needed)."""
    if algorithm in (SHA256, None):
        return hashlib.sha256(data).hexdigest()
    if algorithm == HMAC_SHA256:
        return hmac.new(key(), data, hashlib.sha256).hexdigest()
    raise ValueError(f"unknown block hash algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")


# Hex digits of a block hash that layout 1 stored (pipelines/migration/layout1.py): rows
# migrated from it keep them. Two different blocks whose hashes share 64 bits (1 in 1.8e19
# per comparison) would hide that block's move; the request hash, whole, still says it.
LAYOUT1_BLOCK_DIGEST_CHARS = 16


def same_block_digest(recorded: str | None, computed: str | None) -> bool:
    """Whether two hashes of a block (recorded and re-rendered) agree, by the digits both
    have: a recorded hash migrated from layout 1 has 16."""
    if recorded is None or computed is None:
        return False
    digits = min(len(recorded), len(computed))
    return digits >= LAYOUT1_BLOCK_DIGEST_CHARS and recorded[:digits] == computed[:digits]


def request_sha256(request: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical request bytes: the value capture writes as
    ``rendered_request_sha256``."""
    return hashlib.sha256(canonical_bytes(request)).hexdigest()


def request_blocks(request: Mapping[str, Any]) -> dict[str, Any]:
    """Split a request into its named blocks (see module docstring)."""
    return _blocks(drop_none(request))


_MESSAGE_BLOCKS = tuple(f"messages[{i}]" for i in range(256))


def _blocks(request: dict[str, Any]) -> dict[str, Any]:
    blocks: dict[str, Any] = {}
    if "model" in request:
        blocks["model"] = request["model"]
    if "system" in request:
        blocks["system"] = request["system"]
    for i, message in enumerate(request.get("messages") or []):
        blocks[_MESSAGE_BLOCKS[i] if i < len(_MESSAGE_BLOCKS) else f"messages[{i}]"] = message
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


def parse_canonical(request_json: str | None) -> dict[str, Any] | None:
    """A request back from its canonical JSON text (a calls row's ``request_json``),
    None-free. orjson reads it; where it could read a value differently (it
    makes an int over 64 bits a float) json reads it instead."""
    if not request_json:
        return None
    value = orjson.loads(request_json)
    if b"e+" in orjson.dumps(value):  # a float past 1e16, or an int orjson read as one
        value = json.loads(request_json)
    # text from elsewhere than the spec may hold a None in an object: drop it as the spec does
    return drop_none(value) if "null" in request_json else value


def canonical_blocks(
    request: dict[str, Any] | None,
    documents: Iterable[tuple[str | None, str | None]] = (),
    *,
    plain: bool = False,
) -> dict[str, bytes]:
    """Block name -> the canonical bytes of that block, for a None-free request
    (parsed from canonical JSON, or cleaned) and its retrieved documents. A
    document without text has no block. ``plain`` says the request's own
    orjson bytes passed the spec check (``request_plain``): then every block,
    a part of it, does too, and is not checked again."""
    if not request:
        out = {}
    elif plain:
        try:  # one orjson call per block; an int over 64 bits anywhere sends them all the spec's way
            dumps, sort = orjson.dumps, orjson.OPT_SORT_KEYS
            out = {name: dumps(block, option=sort) for name, block in _blocks(request).items()}
        except TypeError:
            out = {name: _plain_bytes(block) for name, block in _blocks(request).items()}
    else:
        out = {name: canonical_bytes(block) for name, block in _blocks(request).items()}
    for doc_id, text in documents:
        if text is None:
            continue
        block = document_block(doc_id, text)
        data = None
        if type(doc_id) is str and type(text) is str:
            # two strings, keys already in order: orjson writes the spec's bytes (no number, no null)
            try:
                data = orjson.dumps(block)
            except TypeError:  # a lone surrogate: the spec path decides
                pass
        out[f"{DOCUMENT_PREFIX}{doc_id}"] = canonical_bytes(block) if data is None else data
    return out


def _plain_bytes(block: Any) -> bytes:
    try:
        return orjson.dumps(block, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an int over 64 bits (json read it from the text): the spec writes it
        return canonical_bytes(block)


def request_plain(request_json: str | None) -> bool:
    """Whether canonical request text holds nothing orjson writes differently from the spec."""
    return bool(request_json) and _spec_safe(request_json.encode("utf-8"))


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
    *,
    plain_request: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """``block_hashes`` of a request already in canonical JSON (a calls row's
    ``request_json``): parsing it back is cheaper than cleaning the dict again.
    ``plain_request`` is the request the text was written from, when
    ``canonical_request`` returned it: then nothing is parsed."""
    if plain_request is not None:
        return _block_rows(plain_request, documents, block_tokens, plain=True)
    return _block_rows(parse_canonical(request_json), documents, block_tokens, plain=request_plain(request_json))


def _block_rows(
    request: dict[str, Any] | None,
    documents: Iterable[tuple[str, str | None]],
    block_tokens: Mapping[str, int] | None,
    *,
    plain: bool = False,
) -> list[dict[str, Any]]:
    sha256 = hashlib.sha256
    blocks = canonical_blocks(request, documents, plain=plain)
    if not block_tokens:  # the usual case: no tokens to look up per block
        return [{"block": name, "sha256": sha256(data).hexdigest(), "tokens": None} for name, data in blocks.items()]
    get = block_tokens.get
    return [{"block": name, "sha256": sha256(data).hexdigest(), "tokens": get(name)} for name, data in blocks.items()]


def call_id(source_format: str, trace_id: str, span_id: str) -> str:
    """Stable identity of a call: the same source record always gets the same id."""
    return sha256_hex(f"{source_format}|{trace_id}|{span_id}")


_FINGERPRINT_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def record_sha256(row: Mapping[str, Any], ignore: Iterable[str]) -> str:
    """Content hash of a row, ignoring bookkeeping columns (ingested_at, etag...).
    The warehouse merge only rewrites a row when this changes."""
    content = dict(row)  # a C copy, then a few deletions: cheaper than filtering every key
    for key in ignore:
        content.pop(key, None)
    # an internal fingerprint, not the hashing spec: orjson is several times faster.
    # Without OPT_NON_STR_KEYS (a fifth slower) first: for string keys the bytes are the same.
    try:
        data = orjson.dumps(content, option=orjson.OPT_SORT_KEYS, default=str)
    except TypeError:  # a non-string key somewhere
        data = orjson.dumps(content, option=_FINGERPRINT_OPTIONS, default=str)
    return hashlib.sha256(data).hexdigest()
