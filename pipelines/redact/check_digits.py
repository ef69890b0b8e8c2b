"""Check digits of the identifiers tracelake redacts: CPF, CNPJ, card numbers, IBAN.

One implementation serves the recognizers (a match whose check digits fail is
dropped), the synthetic generator (fakes must pass) and the residual scan.
"""

from __future__ import annotations

import string

CNPJ_WEIGHTS_1 = (5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2)
CNPJ_WEIGHTS_2 = (6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2)
# Card prefixes (IIN ranges) and lengths the card recognizer accepts; the
# regex alone would also match any long digit run.
CARD_LENGTHS = range(12, 20)


def digits_only(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def _mod11_digit(total: int) -> int:
    rest = total % 11
    return 0 if rest < 2 else 11 - rest


def cpf_check_digits(base9: str) -> str:
    """The two check digits of a CPF whose first nine digits are ``base9``."""
    d1 = _mod11_digit(sum(int(c) * w for c, w in zip(base9, range(10, 1, -1), strict=True)))
    d2 = _mod11_digit(sum(int(c) * w for c, w in zip(base9 + str(d1), range(11, 1, -1), strict=True)))
    return f"{d1}{d2}"


def is_valid_cpf(text: str) -> bool:
    digits = digits_only(text)
    if len(digits) != 11 or len(set(digits)) == 1:
        return False
    return cpf_check_digits(digits[:9]) == digits[9:]


def cnpj_chars(text: str) -> str:
    """The 14 significant characters of a CNPJ (digits and, since 2026, letters)."""
    return "".join(c for c in text.upper() if c.isdigit() or c in string.ascii_uppercase)


def cnpj_check_digits(base12: str) -> str:
    """Check digits over ``ord(c) - 48`` so that the alphanumeric CNPJ
    (Receita Federal, from July 2026) and the numeric one share one rule."""
    values = [ord(c) - 48 for c in base12.upper()]
    d1 = _mod11_digit(sum(v * w for v, w in zip(values, CNPJ_WEIGHTS_1, strict=True)))
    d2 = _mod11_digit(sum(v * w for v, w in zip([*values, d1], CNPJ_WEIGHTS_2, strict=True)))
    return f"{d1}{d2}"


def is_valid_cnpj(text: str) -> bool:
    chars = cnpj_chars(text)
    if len(chars) != 14 or not chars[12:].isdigit() or len(set(chars)) == 1:
        return False
    return cnpj_check_digits(chars[:12]) == chars[12:]


def luhn_check_digit(partial: str) -> str:
    """The digit that makes ``partial + digit`` pass the Luhn check."""
    total = 0
    for i, c in enumerate(reversed(partial)):
        d = int(c)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def passes_luhn(digits: str) -> bool:
    return len(digits) > 1 and luhn_check_digit(digits[:-1]) == digits[-1]


def card_brand(digits: str) -> str | None:
    """The scheme whose prefix and length ``digits`` fit, or None."""
    n = len(digits)
    p2, p4, p6 = int(digits[:2] or 0), int(digits[:4] or 0), int(digits[:6] or 0)
    if digits[0] == "4" and n in (13, 16, 19):
        return "visa"
    if (51 <= p2 <= 55 or 2221 <= p4 <= 2720) and n == 16:
        return "mastercard"
    if p2 in (34, 37) and n == 15:
        return "amex"
    if (digits.startswith("6011") or digits.startswith("65") or 644 <= int(digits[:3]) <= 649) and 16 <= n <= 19:
        return "discover"
    if 622126 <= p6 <= 622925 and 16 <= n <= 19:
        return "unionpay"
    if digits.startswith("62") and 16 <= n <= 19:
        return "unionpay"
    if (300 <= int(digits[:3]) <= 305 or p2 in (36, 38, 39) or digits.startswith("3095")) and 14 <= n <= 19:
        return "diners"
    if p2 == 35 and 16 <= n <= 19:
        return "jcb"  # issued 3528-3589; generators (Faker) use all of 35xx
    if p4 in (1800, 2131) and n == 15:
        return "jcb"
    if p4 in (5018, 5020, 5038, 5893, 6304, 6759, 6761, 6762, 6763) and 12 <= n <= 19:
        return "maestro"
    if (p4 in (6062, 3841) or p6 == 606282) and n in (13, 16, 19):
        return "hipercard"
    if (
        digits.startswith(
            ("4011", "4312", "4389", "4514", "4576", "5041", "5066", "5067", "509", "6277", "6362", "6363")
        )
        or digits.startswith(("650", "6516", "6550"))
    ) and n == 16:
        return "elo"
    return None


def is_valid_card(text: str) -> bool:
    digits = digits_only(text)
    return len(digits) in CARD_LENGTHS and passes_luhn(digits) and card_brand(digits) is not None


_IBAN_VALUES = {c: str(i) for i, c in enumerate(string.digits + string.ascii_uppercase)}


def iban_check_digits(country: str, bban: str) -> str:
    rearranged = (bban + country + "00").upper()
    number = int("".join(_IBAN_VALUES[c] for c in rearranged))
    return f"{98 - number % 97:02d}"


def is_valid_iban(text: str) -> bool:
    compact = "".join(c for c in text.upper() if c.isalnum())
    if len(compact) < 15 or len(compact) > 34 or not compact[:2].isalpha() or not compact[2:4].isdigit():
        return False
    return iban_check_digits(compact[:2], compact[4:]) == compact[2:4]
