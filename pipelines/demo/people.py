"""The demo's customers: Faker identities in English and Brazilian Portuguese,
with the personal data support conversations really carry (names, emails,
phones, CPF/CNPJ, card numbers) and a plan tier."""

from __future__ import annotations

import random
from dataclasses import dataclass

from faker import Faker

TIERS = (("free", 0.55), ("pro", 0.35), ("vip", 0.10))


@dataclass(frozen=True)
class Customer:
    user_id: str
    language: str  # "en" or "pt-BR"
    tier: str
    name: str
    email: str
    phone: str
    card: str
    tax_id: str  # SSN for en, CPF (or CNPJ for a company) for pt-BR
    company: str | None
    address: str


def _card(rng: random.Random) -> str:
    """A Luhn-valid card number: Visa (16 or 19 digits) or Mastercard (51-55 or 2-series)."""
    kind = rng.random()
    if kind < 0.4:
        prefix, length = "4", 16
    elif kind < 0.5:
        prefix, length = "4", 19
    elif kind < 0.8:
        prefix, length = str(rng.randint(51, 55)), 16
    else:
        prefix, length = str(rng.randint(2221, 2720)), 16
    digits = [int(c) for c in prefix] + [rng.randint(0, 9) for _ in range(length - len(prefix) - 1)]
    total = 0
    for i, d in enumerate(reversed(digits)):
        d = d * 2 if i % 2 == 0 else d
        total += d - 9 if d > 9 else d
    digits.append((10 - total % 10) % 10)
    number = "".join(map(str, digits))
    return " ".join(number[i : i + 4] for i in range(0, len(number), 4))


def population(seed: int, size: int = 600) -> list[Customer]:
    """``size`` customers, the same for the same seed."""
    rng = random.Random(seed)
    fakers = {"en": Faker("en_US"), "pt-BR": Faker("pt_BR")}
    for i, fake in enumerate(fakers.values()):
        fake.seed_instance(seed * 10 + i)
    people = []
    for i in range(size):
        language = "pt-BR" if rng.random() < 0.4 else "en"
        fake = fakers[language]
        tier = rng.choices([t for t, _ in TIERS], [w for _, w in TIERS])[0]
        business = language == "pt-BR" and rng.random() < 0.15
        name = fake.name()
        people.append(
            Customer(
                user_id=f"u-{seed:03d}-{i:05d}",
                language=language,
                tier=tier,
                name=name,
                email=fake.free_email(),
                phone=fake.cellphone_number() if language == "pt-BR" else fake.phone_number(),
                card=_card(rng),
                tax_id=(fake.cnpj() if business else fake.cpf()) if language == "pt-BR" else fake.ssn(),
                company=fake.company() if business else None,
                address=fake.address().replace("\n", ", "),
            )
        )
    return people
