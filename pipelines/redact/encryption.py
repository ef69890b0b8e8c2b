"""Encrypt mode's reversible tokens: ``<ENC:EMAIL_ADDRESS:k1a2b3:ciphertext>``.

AES-SIV (RFC 5297, from ``cryptography``) is deterministic and
authenticated: the same value in the same trace always gives the same token,
so re-ingesting a partition rewrites nothing, and a token cannot be altered
without decryption failing. The trace id is bound in as associated data:
the same email in two traces gives two unrelated tokens (no linking across
traces by ciphertext), and a token moved to another trace does not decrypt.
The key id in the token says which key to decrypt with.
"""

from __future__ import annotations

import base64
import re

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

from pipelines.redact.keys import KeyRing

TOKEN = re.compile(r"<ENC:([A-Z_]+):([A-Za-z0-9_.-]+):([A-Za-z0-9_-]+)>")
# plaintext prefix: was the value a JSON number or a string
_NUMBER, _STRING = b"n", b"s"


class DecryptionError(ValueError):
    """A token that does not decrypt; the message never includes plaintext."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def encrypt_token(value: str | int, entity: str, scope: str, keys: KeyRing) -> str:
    key_id, key = keys.encryption_key()
    plain = (_NUMBER + str(value).encode()) if isinstance(value, int) else (_STRING + value.encode())
    sealed = AESSIV(key).encrypt(plain, [scope.encode()])
    return f"<ENC:{entity}:{key_id}:{_b64(sealed)}>"


def decrypt_match(match: re.Match, scope: str, keys: KeyRing) -> str | int:
    entity, key_id, sealed = match.groups()
    _, key = keys.encryption_key(key_id)
    try:
        plain = AESSIV(key).decrypt(_unb64(sealed), [scope.encode()])
    except (InvalidTag, ValueError):
        raise DecryptionError(
            f"a {entity} token does not decrypt with key {key_id!r} for trace {scope!r}: "
            "wrong key, or the token was moved from another trace"
        ) from None
    text = plain[1:].decode()
    return int(text) if plain[:1] == _NUMBER else text


def decrypt_text(text: str, scope: str, keys: KeyRing, seen: dict[str, str] | None = None) -> str | int:
    """Every token in ``text`` replaced by its plaintext. A text that is exactly
    one token of a former JSON number comes back as that number. ``seen``
    collects token -> plaintext (in memory only: a replay seals echoes again with it)."""

    def one(match: re.Match) -> str | int:
        plain = decrypt_match(match, scope, keys)
        if seen is not None:
            seen[match.group(0)] = str(plain)
        return plain

    whole = TOKEN.fullmatch(text)
    if whole:
        return one(whole)
    return TOKEN.sub(lambda m: str(one(m)), text)
