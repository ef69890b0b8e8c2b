"""Keys held outside the data: encryption keys by id, and the keyed-hash secret.

Environment (read by ``KeyRing.from_env``):

- ``TRACELAKE_REDACTION_KEY``: the secret that encrypt mode encrypts with
  (any string; 32+ random bytes, e.g. ``python -c "import secrets;
  print(secrets.token_urlsafe(48))"``). ``TRACELAKE_REDACTION_KEY_ID`` names
  it (default: a fingerprint of the secret); the id is stored in every token.
- ``TRACELAKE_REDACTION_KEYS``: older keys still needed to decrypt, as
  ``id1=secret1,id2=secret2``.
- ``TRACELAKE_HASH_KEY``: the secret for keyed block hashes, pseudonymized
  identifiers and for seeding synthetic values. Required: without it a run
  stops (``MissingKey``). Only a demo opts into the fixed, published demo key,
  explicitly, with ``TRACELAKE_DEMO=1`` (``tracelake demo`` sets it): fine on a
  laptop, useless as protection (anyone can recompute the hashes).

Secrets are never part of a repr, an error message or the data: tokens and
audit rows carry key ids only.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

DEMO_HASH_KEY = "tracelake-local-demo-hash-key (not a secret: set TRACELAKE_HASH_KEY)"
# The explicit opt-in to DEMO_HASH_KEY when TRACELAKE_HASH_KEY is unset
DEMO_VARIABLE = "TRACELAKE_DEMO"
_TRUE = {"1", "true", "yes", "on"}


class MissingKey(LookupError):
    """A key the operation needs is not configured; the message says which variable to set."""


def fingerprint(secret: bytes) -> str:
    """A short, stable id for a secret that reveals nothing about it."""
    return "k" + hashlib.sha256(b"tracelake-key-id|" + secret).hexdigest()[:10]


@lru_cache(maxsize=64)
def _derive(secret: bytes, purpose: str, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=purpose.encode()).derive(secret)


def _parse_keys(text: str) -> dict[str, bytes]:
    keys = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key_id, sep, secret = item.partition("=")
        if not sep or not key_id.strip() or not secret.strip():
            raise ValueError("TRACELAKE_REDACTION_KEYS items should look like 'id=secret' (comma separated)")
        keys[key_id.strip()] = secret.strip().encode()
    return keys


@dataclass(frozen=True)
class KeyRing:
    hash_secret: bytes = field(default=DEMO_HASH_KEY.encode(), repr=False)
    encryption_secrets: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    current_key_id: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, need_hash_key: bool = True) -> KeyRing:
        """The keys the environment holds. Without ``TRACELAKE_HASH_KEY`` this
        raises ``MissingKey`` unless the demo opted in (``TRACELAKE_DEMO=1``) or
        the caller needs no hash key (decrypting tokens only)."""
        env = os.environ if environ is None else environ
        secrets = _parse_keys(env.get("TRACELAKE_REDACTION_KEYS", ""))
        current = None
        main = env.get("TRACELAKE_REDACTION_KEY", "").strip()
        if main:
            current = env.get("TRACELAKE_REDACTION_KEY_ID", "").strip() or fingerprint(main.encode())
            secrets[current] = main.encode()
        hash_secret = env.get("TRACELAKE_HASH_KEY", "").strip()
        if not hash_secret:
            demo = env.get(DEMO_VARIABLE, "").strip().lower() in _TRUE
            if need_hash_key and not demo:
                raise MissingKey(
                    "TRACELAKE_HASH_KEY is not set: it keys the block hashes and pseudonymized ids, so a run "
                    "without it would store hashes anyone can recompute. Set it to a long random secret "
                    '(python -c "import secrets; print(secrets.token_urlsafe(48))"), the same for every run; '
                    "for a local demo only, set TRACELAKE_DEMO=1 to use the published demo key"
                )
            hash_secret = DEMO_HASH_KEY
        return cls(hash_secret=hash_secret.encode(), encryption_secrets=secrets, current_key_id=current)

    @classmethod
    def from_secrets(
        cls, hash_secret: str | None = None, encryption: Mapping[str, str] | None = None, current: str | None = None
    ) -> KeyRing:
        secrets = {k: v.encode() for k, v in (encryption or {}).items()}
        if current is None and len(secrets) == 1:
            current = next(iter(secrets))
        return cls((hash_secret or DEMO_HASH_KEY).encode(), secrets, current)

    @property
    def hash_key_is_demo(self) -> bool:
        return self.hash_secret == DEMO_HASH_KEY.encode()

    @property
    def hash_key_id(self) -> str:
        return "demo" if self.hash_key_is_demo else fingerprint(self.hash_secret)

    def block_hash_key(self) -> bytes:
        return _derive(self.hash_secret, "tracelake block hash v1", 32)

    def identifier_key(self) -> bytes:
        """Keys the pseudonyms of personal identifiers (identifiers.stored_id)."""
        return _derive(self.hash_secret, "tracelake identifiers v1", 32)

    def synthetic_key(self) -> bytes:
        return _derive(self.hash_secret, "tracelake synthetic values v1", 32)

    def encryption_key(self, key_id: str | None = None) -> tuple[str, bytes]:
        """(key id, 64-byte AES-SIV key) for ``key_id``, or for the current key."""
        key_id = key_id or self.current_key_id
        if key_id is None:
            raise MissingKey(
                "encrypt mode needs a key: set TRACELAKE_REDACTION_KEY to a long random secret "
                '(python -c "import secrets; print(secrets.token_urlsafe(48))")'
            )
        secret = self.encryption_secrets.get(key_id)
        if secret is None:
            raise MissingKey(
                f"no encryption key with id {key_id!r}: set TRACELAKE_REDACTION_KEY (with "
                f"TRACELAKE_REDACTION_KEY_ID={key_id}) or add '{key_id}=...' to TRACELAKE_REDACTION_KEYS"
            )
        return key_id, _derive(secret, "tracelake aes-siv v1", 64)
