"""What the rot check needs to know about how a stored call was redacted.

Redaction (``pipelines.redact``) replaces PII in stored text with placeholders
and stores keyed HMAC-SHA256 hashes for PII-bearing blocks. The ingredients the
check re-renders (template, documents, model, params, tools) hold no user PII,
and the messages come from the record, so most blocks compare as usual. This
view tells the check, per call:

- whether the stored text is redacted (then the whole request hash cannot be
  recomputed, and the comparison rests on blocks: ``basis``);
- which recorded block hashes are keyed, and how to key a re-rendered block
  the same way;
- with ``encrypt`` redaction and its key, how to decrypt the row first, so the
  whole request compares exactly again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RedactionView:
    """Redaction as the check sees it. The default sees none."""

    # call -> True when its stored text holds redaction placeholders
    redacted: Callable[[Mapping[str, Any]], bool] | None = None
    # (call, block name) -> True when that recorded block hash is keyed
    keyed: Callable[[Mapping[str, Any], str], bool] | None = None
    # (block name, canonical JSON of the block) -> the keyed hash redaction stores
    keyed_hash: Callable[[str, str], str] | None = None
    # call -> the call with encrypt-mode values decrypted (and marked unredacted), or None
    decrypt: Callable[[Mapping[str, Any]], Mapping[str, Any] | None] | None = None

    def prepare(self, call: Mapping[str, Any]) -> Mapping[str, Any]:
        if self.decrypt is not None and self.is_redacted(call):
            decrypted = self.decrypt(call)
            if decrypted is not None:
                return {**decrypted, "_decrypted": True}
        return call

    def is_redacted(self, call: Mapping[str, Any]) -> bool:
        return self.redacted is not None and self.redacted(call)

    def is_keyed(self, call: Mapping[str, Any], block: str) -> bool:
        return self.keyed is not None and not call.get("_decrypted") and self.keyed(call, block)

    def keyed_sha256(self, block: str, canonical: str) -> str:
        if self.keyed_hash is None:
            raise RuntimeError(
                f"block {block!r} has a keyed hash but no redaction key was configured; "
                "set the redaction key so the rot check can compare it"
            )
        return self.keyed_hash(block, canonical)


def no_redaction() -> RedactionView:
    return RedactionView()
