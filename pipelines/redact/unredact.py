"""Reversing encrypt mode: tokens back to the values they replaced.

Only ``encrypt`` tokens can be reversed. Placeholders and synthetic values
keep nothing of the original, and credentials are never encrypted (the
default policy replaces them with placeholders in every mode).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from pipelines.redact.encryption import decrypt_text
from pipelines.redact.field_rules import FieldInfo, FieldRules
from pipelines.redact.keys import KeyRing
from pipelines.redact.policy import Policy, load_policy
from pipelines.redact.redactor import trace_scope
from pipelines.redact.row_fields import walk_row
from pipelines.redact.walker import JsonWalker

_MARK = "<ENC:"


class _Decrypt:
    def __init__(self, scope: str, keys: KeyRing):
        self.scope = scope
        self.keys = keys
        self.tokens = 0
        self.seen: dict[str, str] = {}

    def text(self, value: str, path: str, info: FieldInfo) -> str | int | None:
        if _MARK not in value:
            return None
        self.tokens += value.count(_MARK)
        return decrypt_text(value, self.scope, self.keys, self.seen)

    def number(self, value: int, path: str, info: FieldInfo) -> None:
        return None


_walkers: dict[int, tuple[Policy, JsonWalker]] = {}


@lru_cache(maxsize=1)
def _default_policy() -> Policy:
    return load_policy()


def _walker(policy: Policy | None) -> JsonWalker:
    """One walker per policy: the rot check decrypts call after call."""
    policy = policy or _default_policy()
    found = _walkers.get(id(policy))
    if found is None or found[0] is not policy:
        # public fields are skipped by the walker; nothing in them was encrypted
        found = _walkers[id(policy)] = (policy, JsonWalker(FieldRules(policy)))
    return found[1]


def unredact_rows(
    calls: Sequence[dict[str, Any]],
    spans: Sequence[dict[str, Any]] = (),
    keys: KeyRing | None = None,
    *,
    trace_id: str | None = None,
    policy: Policy | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Decrypted copies of the rows (of one trace when ``trace_id`` is given)."""
    keys = keys or KeyRing.from_env(need_hash_key=False)
    walker = _walker(policy)
    out = []
    for table, rows in (("calls", calls), ("spans", spans)):
        done = []
        for row in rows:
            if trace_id is not None and row.get("trace_id") != trace_id:
                continue
            done.append(walk_row(row, table, walker, _Decrypt(row.get("trace_id") or "", keys)))
        out.append(done)
    return out[0], out[1]


def decrypt_call(call: dict[str, Any], keys: KeyRing, policy: Policy | None = None) -> dict[str, Any] | None:
    """One `calls` row decrypted, or None when it holds no encrypt-mode token
    (for the rot check, which then compares whole requests again)."""
    visitor = _Decrypt(call.get("trace_id") or "", keys)
    row = walk_row(
        call, "calls", _walker(policy), visitor
    )  # public documents hold no tokens: visiting them is harmless
    return row if visitor.tokens else None


def decrypt_call_tokens(
    call: dict[str, Any], keys: KeyRing, policy: Policy | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """One `calls` row decrypted and its tokens -> plaintexts (empty when it holds none).
    Raises ``DecryptionError`` (no plaintext in it) for a token that does not decrypt."""
    visitor = _Decrypt(call.get("trace_id") or "", keys)
    return walk_row(call, "calls", _walker(policy), visitor), visitor.seen


def unredact_documents(
    documents: Iterable[Any], keys: KeyRing | None = None, *, policy: Policy | None = None
) -> list[Any]:
    """Decrypted copies of documents redacted by ``Redactor.redact_documents``."""
    keys = keys or KeyRing.from_env(need_hash_key=False)
    walker = _walker(policy)
    return [walker.walk(doc, "", _Decrypt(trace_scope(doc), keys)) for doc in documents]
