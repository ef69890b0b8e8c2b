"""Format-preserving fake values for synthetic mode.

A fake keeps the shape a bug may depend on: punctuation and length, a valid
CPF/CNPJ (alphanumeric too), a Luhn-valid card of the same scheme, an IBAN
with correct check digits, a phone with the same country and area code.
Emails use the RFC 2606 ``example.*`` domains and IPs the documentation
ranges, so a fake can never reach a real person. Values are drawn from a
seed (derived by the caller from a key, the trace and the original value):
the same seed always gives the same fake.
"""

from __future__ import annotations

import random
import string

from pipelines.redact import check_digits
from pipelines.redact.entities import ADDRESS, CARD, CNPJ, CPF, EMAIL, IBAN, IP, PERSON, PHONE, SSN

FIRST_NAMES = (
    "Alex", "Ana", "Bruno", "Camila", "Daniel", "Elena", "Felipe", "Gabriela", "Hugo", "Isabel",
    "Jordan", "Karen", "Lucas", "Mariana", "Nathan", "Olivia", "Paulo", "Quinn", "Rafael", "Sofia",
    "Tiago", "Uma", "Vitor", "Wendy", "Yasmin",
)  # fmt: skip
LAST_NAMES = (
    "Almeida", "Barros", "Carter", "Duarte", "Ellis", "Ferraz", "Gomes", "Hayes", "Ibarra", "Jensen",
    "Klein", "Lopes", "Moreau", "Nunes", "Ortega", "Pires", "Quintana", "Rocha", "Santos", "Teixeira",
)  # fmt: skip
EMAIL_DOMAINS = ("example.com", "example.org", "example.net")


def _fill(template: str, values: str) -> str:
    """Put ``values`` into the alphanumeric positions of ``template``, keeping its punctuation."""
    out, it = [], iter(values)
    for c in template:
        out.append(next(it) if c.isalnum() else c)
    return "".join(out)


def _same_classes(rng: random.Random, text: str) -> str:
    out = []
    for c in text:
        if c.isdigit():
            out.append(rng.choice(string.digits))
        elif c.isupper():
            out.append(rng.choice(string.ascii_uppercase))
        elif c.isalpha():
            out.append(rng.choice(string.ascii_lowercase))
        else:
            out.append(c)
    return "".join(out)


def fake_cpf(rng: random.Random, like: str) -> str:
    base = "".join(rng.choice(string.digits) for _ in range(9))
    return _fill(like, base + check_digits.cpf_check_digits(base))


def fake_cnpj(rng: random.Random, like: str) -> str:
    chars = check_digits.cnpj_chars(like)
    base = _same_classes(rng, chars[:8]) + (chars[8:12] if chars[8:12] == "0001" else _same_classes(rng, chars[8:12]))
    return _fill(like.upper() if not like.isdigit() else like, base + check_digits.cnpj_check_digits(base))


def fake_card(rng: random.Random, like: str) -> str:
    digits = check_digits.digits_only(like)
    body = digits[:4] + "".join(rng.choice(string.digits) for _ in range(len(digits) - 5))
    return _fill(like, body + check_digits.luhn_check_digit(body))


def fake_iban(rng: random.Random, like: str) -> str:
    compact = "".join(c for c in like.upper() if c.isalnum())
    country, bban = compact[:2], _same_classes(rng, compact[4:])
    return _fill(like.upper(), country + check_digits.iban_check_digits(country, bban) + bban)


def fake_phone(rng: random.Random, like: str) -> str:
    digits = check_digits.digits_only(like)
    keep = max(len(digits) - 7, 0)
    # the first subscriber digit 2-9: exchanges starting 0/1 are invalid in most plans
    tail = rng.choice("23456789") + "".join(rng.choice(string.digits) for _ in range(len(digits) - keep - 1))
    out, it = [], iter(digits[:keep] + tail)
    for c in like:
        out.append(next(it) if c.isdigit() else c)
    return "".join(out)


def fake_email(rng: random.Random, like: str) -> str:
    local = like.rsplit("@", 1)[0]
    fake_local = _same_classes(rng, local.lower()) or "user"
    return f"{fake_local}@{rng.choice(EMAIL_DOMAINS)}"


def fake_ip(rng: random.Random, like: str) -> str:
    address, slash, prefix = like.partition("/")
    if ":" in address and "." not in address:
        groups = max(len([g for g in address.split(":") if g]) - 2, 1)
        fake = "2001:db8:" + ":".join(f"{rng.randrange(1, 0xFFFF):x}" for _ in range(groups))
        if groups < 6:
            fake = "2001:db8::" + fake[len("2001:db8:") :]
    else:
        net = rng.choice(("192.0.2", "198.51.100", "203.0.113"))
        fake = f"{net}.{rng.randrange(1, 255)}"
    return fake + slash + prefix


def fake_ssn(rng: random.Random, like: str) -> str:
    # area numbers 900-999 are never issued
    digits = f"9{rng.randrange(0, 100):02d}{rng.randrange(1, 100):02d}{rng.randrange(1, 10000):04d}"
    return _fill(like, digits)


def fake_person(rng: random.Random, like: str) -> str:
    words = like.split()
    names = [rng.choice(FIRST_NAMES)]
    names += [rng.choice(LAST_NAMES) for _ in range(max(len(words) - 1, 0))]
    fake = " ".join(names)
    return fake.upper() if like.isupper() else fake


def fake_address(rng: random.Random, like: str) -> str:
    """Same character classes (house numbers stay numbers), drawn at random."""
    return _same_classes(rng, like)


def fake_token(rng: random.Random, like: str) -> str:
    """Same prefix up to the last separator in the first 14 characters, same character classes after."""
    cut = max(like.rfind("-", 0, 14), like.rfind("_", 0, 14)) + 1
    return like[:cut] + _same_classes(rng, like[cut:])


GENERATORS = {
    CPF: fake_cpf,
    CNPJ: fake_cnpj,
    CARD: fake_card,
    IBAN: fake_iban,
    PHONE: fake_phone,
    EMAIL: fake_email,
    IP: fake_ip,
    SSN: fake_ssn,
    PERSON: fake_person,
    ADDRESS: fake_address,
}


def synthesize(entity: str, value: str, seed: bytes, *, number: bool = False) -> str:
    """A fake for ``value``; for a JSON ``number``, one that is still a number
    (all digits, no leading zero to lose)."""
    rng = random.Random(int.from_bytes(seed[:16], "big"))
    make = GENERATORS.get(entity, fake_token)
    for _ in range(32):
        fake = make(rng, value)
        if fake != value and (not number or (fake.isdigit() and not fake.startswith("0"))):
            return fake
    return fake
