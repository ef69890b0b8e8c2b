"""What replaces a detected value, consistently within one trace.

A ``TraceSubstitutions`` belongs to one trace (its scope): the same value
gets the same replacement everywhere in it, across user turns, tool
arguments, tool results, retrieved documents and outputs, and in
``request_json`` as in the structured columns. "The same value" is compared
after normalizing (an email's case, a phone's punctuation and country code,
a CPF with or without dots), so ``Maria@X.com`` and ``maria@x.com`` share
``<EMAIL_ADDRESS_1>``.
"""

from __future__ import annotations

import hashlib
import hmac
from functools import lru_cache
from typing import Literal

import phonenumbers

from pipelines.redact import encryption, synthetic
from pipelines.redact.entities import ADDRESS, CARD, CNPJ, CPF, CREDENTIAL, EMAIL, IBAN, IP, PERSON, PHONE, SSN
from pipelines.redact.keys import KeyRing
from pipelines.redact.policy import Policy

Mode = Literal["placeholder", "encrypt", "synthetic"]
MODES: tuple[str, ...] = ("placeholder", "encrypt", "synthetic")


@lru_cache(maxsize=65_536)  # per replacement, and a trace repeats its values (phones parse slowly)
def normalize(entity: str, value: str) -> str:
    """The form two mentions of one value share."""
    if entity == CPF:  # a CPF held as an integer lost its leading zeros
        return "".join(c for c in value if c.isdigit()).zfill(11)
    if entity in (SSN, CARD):
        return "".join(c for c in value if c.isdigit())
    if entity in (CNPJ, IBAN):
        return "".join(c for c in value.upper() if c.isalnum())
    if entity == PHONE:
        text = value.strip()
        if text.startswith("+"):
            try:
                return str(phonenumbers.parse(text, None).national_number)
            except phonenumbers.NumberParseException:
                pass
        return "".join(c for c in text if c.isdigit()).lstrip("0")
    if entity in (EMAIL, IP):
        return value.strip().lower()
    if entity in (PERSON, ADDRESS):
        return " ".join(value.casefold().split())
    return value


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"redaction mode must be one of {', '.join(MODES)}; got {mode!r}")
    return mode


def operator_for(policy: Policy, entity: str, mode: str) -> str:
    operator = policy.rule(entity).operator
    operator = mode if operator == "mode" else operator
    if entity == CREDENTIAL and operator == "synthetic":
        return "placeholder"  # a realistic fake secret would trip every secret scanner downstream
    return operator


def mask(value: str) -> str:
    alnum = [i for i, c in enumerate(value) if c.isalnum()]
    hidden = set(alnum[:-4]) if len(alnum) > 4 else set(alnum)
    return "".join("*" if i in hidden else c for i, c in enumerate(value))


class TraceSubstitutions:
    def __init__(self, scope: str, mode: str, policy: Policy, keys: KeyRing):
        self.scope = scope
        self.mode = check_mode(mode)
        self.policy = policy
        self.keys = keys
        self._by_value: dict[tuple[str, str], str] = {}
        self._numbers: dict[str, int] = {}
        self._synthetic_key = keys.synthetic_key() if mode == "synthetic" else b""

    def replace(self, entity: str, value: str, *, number: bool = False) -> str | int:
        """The replacement for one detected value (``number``: it was a JSON integer)."""
        operator = operator_for(self.policy, entity, self.mode)
        if operator == "keep":
            return int(value) if number else value
        if operator == "redact":
            return f"<{entity}>"
        if operator == "mask":
            return mask(value)
        if operator == "encrypt":
            return encryption.encrypt_token(int(value) if number else value, entity, self.scope, self.keys)
        key = (entity, normalize(entity, value))
        if operator == "placeholder":
            found = self._by_value.get(key)
            if found is None:
                n = self._numbers[entity] = self._numbers.get(entity, 0) + 1
                found = self._by_value[key] = f"<{entity}_{n}>"
            return found
        seed = hmac.digest(self._synthetic_key, f"{self.scope}|{key[0]}|{key[1]}".encode(), hashlib.sha256)
        fake = synthetic.synthesize(entity, value, seed, number=number)
        if number and fake.isdigit() and not fake.startswith("0"):
            return int(fake)
        return fake
