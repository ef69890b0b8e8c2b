"""What the rot check needs to know about how a stored call was redacted.

Redaction (``pipelines.redact``) replaces PII in stored text before it is
written, flags the call ``redacted``, records what it replaced in
``redaction_audit``, keeps ``request_sha256`` / ``request_hash_matches`` of the
raw request, and stores keyed HMAC-SHA256 hashes for the blocks that may hold
PII (each ``block_hashes`` row names its algorithm). The ingredients the check
re-renders (template, documents, model, params, tools) come from the stores
and hold no user PII; the messages come from the record. So:

- a call redaction did not change compares whole, as usual (``raw``);
- an ``encrypt``-mode call, with the key, is decrypted first
  (``pipelines.redact.unredact.decrypt_call``) and compares whole again
  (``decrypted``);
- any other redacted call compares block by block (``redacted``): keyed
  blocks through ``pipelines.redact.block_hashes.block_sha256`` under the same
  hash key, which is why the check needs the ``KeyRing``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pipelines.record.canonical import same_block_digest, sha256_hex
from pipelines.redact.block_hashes import SHA256, block_sha256
from pipelines.redact.encryption import DecryptionError
from pipelines.redact.keys import KeyRing, MissingKey
from pipelines.redact.policy import Policy, load_policy

RAW, DECRYPTED, REDACTED = "raw", "decrypted", "redacted"
# pipelines.redact.redactor.REDACTED_FLAG; not imported from there, which loads presidio
REDACTED_FLAG = "redacted"
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
    """Redaction as the check sees it: which calls were redacted, how, and the keys.
    ``policy`` is the redaction policy (its field rules say where tokens can be)."""

    def __init__(
        self,
        audits: Mapping[str, CallRedaction] | None = None,
        keys: KeyRing | None = None,
        policy: Policy | None = None,
    ):
        self.audits = dict(audits or {})
        self.keys = keys or KeyRing()
        self._policy = policy
        self._hashes: dict[tuple[str, str], str] = {}

    @cached_property
    def policy(self) -> Policy:
        return self._policy or load_policy()

    def audit(self, call: Mapping[str, Any]) -> CallRedaction | None:
        return self.audits.get(call["call_id"])

    def is_redacted(self, call: Mapping[str, Any]) -> bool:
        return REDACTED_FLAG in (call.get("flags") or ()) or self.audit(call) is not None

    def prepare(self, call: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
        """(the call, decrypted where the key allows, and its state: raw | decrypted | redacted)."""
        if not self.is_redacted(call):
            return call, RAW
        audit = self.audit(call)
        if self.keys.encryption_secrets and (audit is None or audit.mode == ENCRYPT):
            from pipelines.redact.unredact import decrypt_call  # loads presidio: only when decrypting

            try:
                decrypted = decrypt_call(dict(call), self.keys, self.policy)
            except (DecryptionError, MissingKey):
                decrypted = None  # a wrong or missing key: still checkable block by block
            if decrypted is not None:
                return decrypted, DECRYPTED
        return call, REDACTED

    def variables_redacted(self, call: Mapping[str, Any]) -> bool:
        """Were the template variables redacted? Without an audit row, assume they may have been."""
        audit = self.audit(call)
        return audit is None or audit.touched("template_variables_json")

    def documents_redacted(self, call: Mapping[str, Any]) -> bool:
        audit = self.audit(call)
        return audit is None or audit.touched("retrieval.documents")

    def keyed_hashes_usable(self, call: Mapping[str, Any]) -> bool:
        """False when the call's keyed hashes were made with another hash key than ours."""
        audit = self.audit(call)
        return audit is None or audit.hash_key_id in (None, self.keys.hash_key_id)

    def matches(self, sha: str, algorithm: str | None, canonical: str, plain: str | None = None) -> bool:
        """Does a recorded block hash (under ``algorithm``) match a block's canonical JSON?
        ``plain``: the canonical JSON's sha256 where the caller has it (a rendering's)."""
        if plain is not None and (algorithm or SHA256) == SHA256:
            return same_block_digest(sha, plain)
        # canonical strings come from the renderer's caches, so the same objects repeat
        key = (algorithm or SHA256, canonical)
        found = self._hashes.get(key)
        if found is None:
            digest = (
                sha256_hex(canonical) if key[0] == SHA256 else block_sha256(json.loads(canonical), algorithm, self.keys)
            )
            found = self._hashes[key] = digest
        return same_block_digest(sha, found)
