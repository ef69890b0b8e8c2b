"""What the rot check needs to know about how a stored call was redacted.

Redaction (``pipelines.redact``) replaces PII in stored text before it is
written, records what it replaced in ``redaction_audit``, and stores keyed
HMAC-SHA256 hashes for the blocks that may hold PII (``block_hashes`` rows
say which algorithm). The ingredients the check re-renders (template,
documents, model, params, tools) come from the stores and hold no user PII;
the messages come from the record. So:

- a call redaction did not touch compares whole, as usual (``raw``);
- an ``encrypt``-mode call, with the key, is decrypted first and compares
  whole again (``decrypted``);
- any other redacted call compares block by block (``redacted``): keyed
  blocks through ``pipelines.redact.block_hashes.block_sha256`` with the same
  hash key, which is why the check needs the ``KeyRing``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipelines.record.canonical import sha256_hex
from pipelines.redact.block_hashes import SHA256, block_sha256
from pipelines.redact.encryption import TOKEN, DecryptionError, decrypt_text
from pipelines.redact.keys import KeyRing, MissingKey
from pipelines.redact.walker import dumps_like, looks_like_json

RAW, DECRYPTED, REDACTED = "raw", "decrypted", "redacted"
ENCRYPT = "encrypt"


@dataclass(frozen=True)
class CallRedaction:
    """One call's `redaction_audit` row, as far as the check cares."""

    mode: str
    fields: tuple[str, ...] = ()
    hash_key_id: str | None = None

    def touched(self, column: str) -> bool:
        """True when redaction replaced something in ``column`` (or under it)."""
        return any(f == column or f.startswith((column + ".", column + "[")) for f in self.fields)


def audits_from_rows(rows: Iterable[Mapping[str, Any]]) -> dict[str, CallRedaction]:
    """`redaction_audit` rows -> the calls whose stored text redaction changed."""
    out = {}
    for row in rows:
        if row.get("replacements"):
            out[row["call_id"]] = CallRedaction(row["mode"], tuple(row.get("fields") or ()), row.get("hash_key_id"))
    return out


class RedactionView:
    """Redaction as the check sees it: which calls were redacted, how, and the keys."""

    def __init__(self, audits: Mapping[str, CallRedaction] | None = None, keys: KeyRing | None = None):
        self.audits = dict(audits or {})
        self.keys = keys or KeyRing()
        self._keyed: dict[tuple[str, str], str] = {}

    def audit(self, call: Mapping[str, Any]) -> CallRedaction | None:
        return self.audits.get(call["call_id"])

    def prepare(self, call: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
        """(the call with decryptable values decrypted, its state: raw | decrypted | redacted)."""
        audit = self.audit(call)
        if audit is None:
            return call, RAW
        if audit.mode != ENCRYPT or not self.keys.encryption_secrets:
            return call, REDACTED
        try:
            return decrypt_call(call, self.keys), DECRYPTED
        except (DecryptionError, MissingKey):
            # a wrong or missing key: the call is still checkable block by block
            return call, REDACTED

    def keyed_hashes_usable(self, call: Mapping[str, Any]) -> bool:
        """False when the call's keyed hashes were made with another hash key than ours."""
        audit = self.audit(call)
        return audit is None or audit.hash_key_id in (None, self.keys.hash_key_id)

    def matches(self, sha: str, algorithm: str | None, canonical: str) -> bool:
        """Does a recorded block hash (under ``algorithm``) match a block's canonical JSON?"""
        if algorithm in (None, SHA256):
            return sha256_hex(canonical) == sha
        key = (algorithm, canonical)
        found = self._keyed.get(key)
        if found is None:
            found = self._keyed[key] = block_sha256(json.loads(canonical), algorithm, self.keys)
        return found == sha


def decrypt_call(call: Mapping[str, Any], keys: KeyRing) -> dict[str, Any]:
    """The columns the check reads values from, with encrypt-mode tokens decrypted.
    Tokens are bound to the trace id, which is their associated data."""
    scope = call.get("trace_id") or ""
    out = dict(call)
    for column in ("request_json", "template_variables_json"):
        if out.get(column) and "<ENC:" in out[column]:
            out[column] = json.dumps(
                _decrypt(json.loads(out[column]), scope, keys),
                sort_keys=True,
                separators=(",", ":"),
                ensure_ascii=False,
            )
    retrieval = out.get("retrieval")
    if retrieval and retrieval.get("documents"):
        docs = [
            {**d, "text": _decrypt(d["text"], scope, keys)} if d.get("text") and "<ENC:" in d["text"] else d
            for d in retrieval["documents"]
        ]
        out["retrieval"] = {**retrieval, "documents": docs}
    return out


def _decrypt(value: Any, scope: str, keys: KeyRing) -> Any:
    if isinstance(value, str):
        if "<ENC:" not in value:
            return value
        if not TOKEN.fullmatch(value) and looks_like_json(value):
            try:
                inner = json.loads(value)
            except ValueError:
                return decrypt_text(value, scope, keys)
            # JSON inside a string was redacted leaf by leaf: decrypt it the same way
            return dumps_like(value, _decrypt(inner, scope, keys))
        return decrypt_text(value, scope, keys)
    if isinstance(value, list):
        return [_decrypt(v, scope, keys) for v in value]
    if isinstance(value, dict):
        return {k: _decrypt(v, scope, keys) for k, v in value.items()}
    return value
