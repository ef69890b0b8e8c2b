"""Authenticated exact replay: an ``encrypt``-mode call's tokens decrypted in
memory, its request rebuilt and checked against the recorded hash before
anything is sent, and every decryption accounted for in `unredaction_log`.

- The replay key is read at run time from the environment (``replay_keys``):
  ``TRACELAKE_REDACTION_KEY`` / ``TRACELAKE_REDACTION_KEYS`` as encrypt mode
  reads them, or ``TRACELAKE_REDACTION_KEY_REF``, a reference to where the
  secret lives (``file:/run/secrets/tracelake`` as a secrets manager mounts it,
  ``env:OTHER_VARIABLE``). It is never a config value, never stored, never shown.
- ``Unlocker.unlock`` decrypts a call (``pipelines.redact.unredact``), rebuilds
  its request from the decrypted ``request_json`` and hashes it with the record's
  hashing (``pipelines.record.canonical.request_sha256``): equal to the recorded
  ``rendered_request_sha256`` is ``verified`` (the replay may be ``exact``);
  otherwise ``decrypted_request_mismatch``. A token that does not decrypt
  (altered, moved from another trace, unknown key id) is ``decryption_failed``:
  nothing of that call is sent, and the error names the call and the key id only.
- The decrypted call lives in memory only. What comes back for it (the answer,
  an error) is sealed again (``Seal``): every plaintext the call's tokens held is
  put back as its token before anything is stored or logged.
- ``log_rows`` turns the decryptions into `unredaction_log` rows: who, which
  run, when, which call, the purpose, the key ids and the outcome; never a value.
"""

from __future__ import annotations

import getpass
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipelines.record.canonical import request_sha256, sha256_hex
from pipelines.redact.encryption import TOKEN, DecryptionError
from pipelines.redact.keys import KeyRing, MissingKey
from pipelines.replay.fidelity import FAILED, KEY_ABSENT, MISMATCH, REDACTED_FLAG, VERIFIED

ENCRYPT = "encrypt"
KEY_REF = "TRACELAKE_REDACTION_KEY_REF"
LOG_TABLE = "unredaction_log"
PURPOSES = ("replay", "ablate", "unredact")
# `tracelake demo` ingests its last day in encrypt mode under this key and replays with it: published,
# so it protects nothing; a deployment sets its own secret
DEMO_REPLAY_KEY = "tracelake-demo-replay-key (published: not a secret)"


class UnlockError(ValueError):
    """A call that cannot be decrypted for replay; the message holds no plaintext."""


def replay_keys(environ: Mapping[str, str] | None = None) -> KeyRing | None:
    """The replay key as the environment holds it now, or None when none is configured."""
    env = dict(os.environ if environ is None else environ)
    ref = env.get(KEY_REF, "").strip()
    if ref and not env.get("TRACELAKE_REDACTION_KEY", "").strip():
        env["TRACELAKE_REDACTION_KEY"] = _resolve(ref, env)
    keys = KeyRing.from_env(env, need_hash_key=False)
    return keys if keys.encryption_secrets else None


def _resolve(ref: str, env: Mapping[str, str]) -> str:
    scheme, _, where = ref.partition(":")
    if scheme == "file":
        path = Path(where)
        if not path.is_file():
            raise MissingKey(f"{KEY_REF} names {path}, which is not a readable file")
        return path.read_text().strip()
    if scheme == "env":
        value = env.get(where, "").strip()
        if not value:
            raise MissingKey(f"{KEY_REF} names the variable {where}, which is not set")
        return value
    raise MissingKey(f"{KEY_REF} should be file:/path or env:NAME (got a reference of scheme {scheme!r})")


class Seal:
    """Plaintexts back to their tokens in whatever a decrypted request produced."""

    def __init__(self, seen: Mapping[str, str]):
        self.seen = dict(seen)
        # longest first, so a value that contains another is sealed whole
        self._tokens = {plain: token for token, plain in seen.items() if plain.strip()}
        ordered = sorted(self._tokens, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(p) for p in ordered)) if ordered else None

    @classmethod
    def joined(cls, seals: list[Seal]) -> Seal:
        """One seal for what several decrypted calls produce together (an ablation's variants)."""
        return cls({token: plain for seal in seals for token, plain in seal.seen.items()})

    def __call__(self, value: Any) -> Any:
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self._pattern.sub(lambda m: self._tokens[m.group(0)], value)
        if isinstance(value, Mapping):
            return {k: self(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self(v) for v in value)
        return value


@dataclass(frozen=True)
class Unlock:
    """What decrypting one call found. ``call`` and ``body`` hold plaintext: memory only."""

    outcome: str
    call: Mapping[str, Any] | None = field(default=None, repr=False)
    body: dict[str, Any] | None = field(default=None, repr=False)
    seal: Seal | None = field(default=None, repr=False)
    error: str | None = None


@dataclass(frozen=True)
class Decryption:
    """One decryption, as `unredaction_log` records it (no value)."""

    call_id: str | None
    trace_id: str | None
    at: datetime
    key_ids: tuple[str, ...]
    tokens: int
    outcome: str


def needs_key(call: Mapping[str, Any], redaction_mode: str | None) -> bool:
    return redaction_mode == ENCRYPT and REDACTED_FLAG in (call.get("flags") or ())


class Unlocker:
    """Decrypts calls for one run, once each, and remembers what it did."""

    def __init__(self, keys: KeyRing | None, policy: Any = None):
        self.keys = keys if keys is not None and keys.encryption_secrets else None
        self.policy = policy
        self._found: dict[str, Unlock] = {}
        self.decryptions: list[Decryption] = []
        self._logged = 0

    def unlock(self, call: Mapping[str, Any], redaction_mode: str | None) -> Unlock | None:
        """None for a call with nothing to decrypt; else what decrypting it found."""
        if not needs_key(call, redaction_mode):
            return None
        if self.keys is None:
            return Unlock(KEY_ABSENT)
        found = self._found.get(call["call_id"])
        if found is None:
            found = self._found[call["call_id"]] = self._decrypt(call)
        return found

    def _decrypt(self, call: Mapping[str, Any]) -> Unlock:
        from pipelines.redact.unredact import decrypt_call_tokens  # loads presidio: only with a key

        at = datetime.now(UTC)
        key_ids = tuple(sorted({m.group(2) for m in TOKEN.finditer(call.get("request_json") or "")}))
        try:
            decrypted, seen = decrypt_call_tokens(dict(call), self.keys, self.policy)
        except (DecryptionError, MissingKey) as error:
            self.decryptions.append(Decryption(call["call_id"], call.get("trace_id"), at, key_ids, 0, FAILED))
            return Unlock(FAILED, error=f"call {call['call_id']}: {error}; nothing was sent for it")
        body = json.loads(decrypted["request_json"])
        outcome = VERIFIED if request_sha256(body) == call.get("rendered_request_sha256") else MISMATCH
        self.decryptions.append(Decryption(call["call_id"], call.get("trace_id"), at, key_ids, len(seen), outcome))
        return Unlock(outcome, decrypted, body, Seal(seen))

    def unlogged(self) -> list[Decryption]:
        """Decryptions not yet handed out for the log (each once)."""
        fresh, self._logged = self.decryptions[self._logged :], len(self.decryptions)
        return fresh


def redaction_mode_of(warehouse: Any, call: Mapping[str, Any]) -> str | None:
    """How ingest redacted ``call`` (its `redaction_audit` row), or None when it was not."""
    import polars as pl

    day = call.get("occurred_date") or (call.get("occurred_at") and call["occurred_at"].date())
    where = (pl.col("call_id") == call["call_id"]) & (pl.col("source_table") == "calls")
    if day is not None:
        where = where & (pl.col("occurred_date") == day)
    modes = warehouse.read("redaction_audit", where, ["mode"])["mode"].to_list()
    return modes[0] if modes else None


def unlock_for_command(
    warehouse: Any, calls: list[Mapping[str, Any]], *, purpose: str, run_id: str, policy_path: str | None = None
) -> dict[str, Unlock]:
    """``tracelake replay CALL_ID`` / ``ablate``: each call decrypted where it needs and the environment
    holds the key, the decryptions appended to `unredaction_log` before anything is sent."""
    from pipelines.redact.policy import load_policy

    keys = replay_keys()
    unlocker = Unlocker(keys, load_policy(policy_path) if keys is not None else None)
    found = {}
    for call in calls:
        unlock = unlocker.unlock(call, redaction_mode_of(warehouse, call))
        if unlock is not None:
            found[call["call_id"]] = unlock
    rows = log_rows(unlocker.unlogged(), purpose=purpose, run_id=run_id)
    if rows:
        warehouse.merge(LOG_TABLE, rows)
    return found


def actor() -> str:
    """Who is decrypting: the operating-system account the process runs as."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid:{os.getuid()}"


def log_rows(
    decryptions: list[Decryption], *, purpose: str, run_id: str, candidate: str | None = None, who: str | None = None
) -> list[dict[str, Any]]:
    """`unredaction_log` rows for ``decryptions`` (append-only: each row's id is unique to its moment)."""
    if purpose not in PURPOSES:
        raise ValueError(f"purpose should be one of {', '.join(PURPOSES)}, not {purpose!r}")
    who = who or actor()
    rows = []
    for d in decryptions:
        row = {
            "entry_id": sha256_hex(f"{run_id}|{purpose}|{d.call_id}|{d.at.isoformat()}"),
            "decrypted_at": d.at,
            "decrypted_date": d.at.date(),
            "purpose": purpose,
            "actor": who,
            "run_id": run_id,
            "candidate": candidate,
            "call_id": d.call_id,
            "trace_id": d.trace_id,
            "key_ids": list(d.key_ids),
            "tokens": d.tokens,
            "outcome": d.outcome,
        }
        rows.append(row)
    return rows
