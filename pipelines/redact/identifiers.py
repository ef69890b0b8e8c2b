"""Identifiers that are personal data: pseudonymized with the keyed hash.

Applications often use an email, a phone or a tax id as the user id, the
session id, a tag or a segment value. Those columns are what people filter
on, so they are not replaced by per-trace placeholders: a personal value
becomes ``pii-`` + a keyed hash of its normalized form, the same in every
trace, table and run under one ``TRACELAKE_HASH_KEY``. Ids that are not
personal (``u_123``, a UUID) are stored as they are.

``stored_id(raw, keys)`` is the one mapping from a raw id to its stored form:
everything that filters by a user- or session-supplied id (``tracelake
forget --user-id``, ``tracelake find --user-id``) passes the raw value through
it first.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from pipelines.redact import check_digits
from pipelines.redact.entities import CARD, CNPJ, CPF, EMAIL, PHONE
from pipelines.redact.keys import KeyRing
from pipelines.redact.substitution import normalize

PREFIX = "pii-"
# row columns holding identifiers or labels, and JSON keys that hold the same
ID_COLUMNS = ("user_id", "session_id")
LABEL_COLUMNS = ("tags", "segment")
ID_KEYS = frozenset({"user_id", "session_id", "end_user_id", "customer_id", "user", "session"})

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$")
_PHONE_CHARS = re.compile(r"^\+?[\d\s().-]{10,24}$")
_PHONE_REGIONS = ("BR", "US", "GB")


@lru_cache(maxsize=65_536)  # user and session ids repeat in every row of a trace
def personal_entity(value: str) -> str | None:
    """The entity a whole identifier is (email, CPF, CNPJ, card, phone), or None."""
    text = value.strip()
    if not text or text.startswith(PREFIX):
        return None
    if "@" in text:
        return EMAIL if _EMAIL.match(text) else None
    if not _PHONE_CHARS.match(text):
        return None
    digits = "".join(c for c in text if c.isdigit())
    if len(digits) == 11 and check_digits.is_valid_cpf(digits):
        return CPF
    if len(digits) == 14 and check_digits.is_valid_cnpj(digits):
        return CNPJ
    if 13 <= len(digits) <= 19 and check_digits.is_valid_card(digits):
        return CARD
    return PHONE if _e164(text) is not None else None


def _e164(text: str) -> str | None:
    """A valid phone number in E.164 (+5511987654321), however it was written, else None."""
    import phonenumbers

    text = text.strip()
    digits = "".join(c for c in text if c.isdigit())
    attempts = [(text if text.startswith("+") else "+" + digits, None)]
    attempts += [(text, region) for region in _PHONE_REGIONS]
    for number, region in attempts:
        try:
            parsed = phonenumbers.parse(number, region)
        except phonenumbers.NumberParseException:
            continue
        if phonenumbers.is_valid_number(parsed):
            return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)
    return None


def pseudonym(entity: str, value: str, keys: KeyRing) -> str:
    """``pii-`` + 20 base32 characters of HMAC-SHA256(normalized value): no digit runs
    the residual scan could mistake for a CPF or card."""
    normalized = (_e164(value) or value) if entity == PHONE else normalize(entity, value)
    digest = hmac.digest(keys.identifier_key(), f"{entity}|{normalized}".encode(), hashlib.sha256)
    return PREFIX + base64.b32encode(digest[:15]).decode().lower()


def stored_id(raw: str | None, keys: KeyRing) -> str | None:
    """How ``raw`` (a user id, session id, tag or segment value) is stored: its
    pseudonym when it is personal data, else itself."""
    if raw is None:
        return None
    entity = personal_entity(raw)
    return raw if entity is None else pseudonym(entity, raw, keys)


def pseudonymize_row(row: Mapping[str, Any], keys: KeyRing) -> dict[str, Any]:
    """The identifier and label columns of a row that change (only those)."""
    update: dict[str, Any] = {}
    for column in ID_COLUMNS:
        value = row.get(column)
        if isinstance(value, str):
            stored = stored_id(value, keys)
            if stored != value:
                update[column] = stored
    tags = row.get("tags")
    if tags:
        stored_tags = [stored_id(t, keys) if isinstance(t, str) else t for t in tags]
        if stored_tags != list(tags):
            update["tags"] = stored_tags
    segment = row.get("segment")
    if segment:
        stored_segment = _segment(segment, keys)
        if stored_segment != segment:
            update["segment"] = stored_segment
    return update


def _segment(segment: Any, keys: KeyRing) -> Any:
    """A map column as a dict, a list of (key, value) pairs or of {key, value} dicts."""
    if isinstance(segment, Mapping):
        return {k: stored_id(v, keys) if isinstance(v, str) else v for k, v in segment.items()}
    out = []
    for item in segment:
        if isinstance(item, Mapping):
            value = item.get("value")
            out.append({**item, "value": stored_id(value, keys) if isinstance(value, str) else value})
        else:
            key, value = item
            out.append((key, stored_id(value, keys) if isinstance(value, str) else value))
    return out
