"""Regular expressions shared by the recognizers and the residual-PII scan.

Both sides must agree: the residual scan only flags what the redactor is
expected to have replaced. Patterns use the ``regex`` module (the one
presidio uses). A pattern with a ``secret`` group reports only that group
(the password of ``scheme://user:password@host``, the token after
``Bearer``), so the surrounding text stays readable.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

import regex

_DIGIT_BYTES = b"0123456789"
# a decimal digit of another script: Arabic-Indic, Devanagari, fullwidth (what a CJK IME types)...
_OTHER_DIGIT = re.compile(r"(?![0-9])\d")


def with_ascii_digits(text: str) -> str:
    """``text`` with every decimal digit of another script written as its ASCII digit:
    one character for one, so positions stay those of ``text``. The recognizers and
    the residual scan read this: a CPF or card typed in fullwidth or Arabic-Indic digits
    is the same number, and the check-digit validators know ASCII digits only."""
    if text.isascii() or _OTHER_DIGIT.search(text) is None:
        return text
    return _OTHER_DIGIT.sub(lambda m: str(unicodedata.decimal(m.group())), text)


def ascii_digits(text: str) -> int:
    """How many ASCII digits ``text`` holds. Through bytes: ``bytes.translate``
    deletes at C speed, ``str.translate`` looks every character up in a dict
    (10x slower, and the recognizers' gates count the digits of every text).
    In UTF-8 an ASCII digit byte is always the digit itself."""
    data = text.encode("utf-8", "surrogatepass")
    return len(data) - len(data.translate(None, _DIGIT_BYTES))


CPF_FORMATTED = r"\b\d{3}\.\d{3}\.\d{3}-\d{2}\b"
CPF_PLAIN = r"\b\d{9}-?\d{2}\b"
CNPJ_FORMATTED = r"\b[0-9A-Z]{2}\.[0-9A-Z]{3}\.[0-9A-Z]{3}/[0-9A-Z]{4}-\d{2}\b"
CNPJ_PLAIN = r"\b\d{2}\.?\d{3}\.?\d{3}/?\d{4}-?\d{2}\b"
# Unformatted alphanumeric CNPJ: 12 characters with at least one letter, then two digits.
CNPJ_ALNUM_PLAIN = r"\b(?=[0-9A-Z]{0,11}[A-Z])[0-9A-Z]{12}\d{2}\b"
# 4-4-4-4(-3) groups, 4-6-5 (Amex) / 4-6-4 (Diners), or 12-19 plain digits;
# the separator is the same throughout one number.
CARD = (
    r"(?<![\w-])(?:"
    r"\d{4}(?P<s1>[ -]?)\d{4}(?P=s1)\d{4}(?P=s1)\d{1,4}(?:(?P=s1)\d{1,3})?"
    r"|\d{4}(?P<s2>[ -]?)\d{6}(?P=s2)\d{4,5}"
    r"|\d{12,19}"
    r")(?![\w]|-\d)"
)


@dataclass(frozen=True)
class CredentialPattern:
    name: str
    regex: str
    score: float = 1.0
    ignore_case: bool = False


CREDENTIALS = (
    CredentialPattern("anthropic_api_key", r"(?<![\w-])sk-ant-[A-Za-z0-9_-]{20,}"),
    CredentialPattern("openai_api_key", r"(?<![\w-])sk-(?!ant-)(?=[A-Za-z0-9_-]{0,200}\d)[A-Za-z0-9_-]{20,}"),
    CredentialPattern("aws_access_key_id", r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    CredentialPattern("github_token", r"(?<!\w)(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{60,})(?!\w)"),
    CredentialPattern("slack_token", r"(?<![\w-])xox[abposr]-[A-Za-z0-9-]{10,}"),
    CredentialPattern("google_api_key", r"(?<![\w-])AIza[0-9A-Za-z_-]{35}(?![\w-])"),
    CredentialPattern("stripe_key", r"(?<!\w)(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}"),
    CredentialPattern("jwt", r"(?<![\w-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
    CredentialPattern(
        "private_key",
        r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----[\s\S]{20,20000}?-----END (?:[A-Z]+ )*PRIVATE KEY-----",
    ),
    CredentialPattern(
        "bearer_token",
        r"\b(?:bearer|basic|token)\s{1,5}(?P<secret>[A-Za-z0-9._~+/-]{16,}=*)",
        ignore_case=True,
    ),
    CredentialPattern(
        "url_password",
        r"\b[a-z][a-z0-9+.-]{1,20}://[^\s:/?#@\"'<>]{1,256}:(?P<secret>[^\s/?#@\"'<>]{1,256})@",
        ignore_case=True,
    ),
    CredentialPattern(
        "password_assignment",
        r"\b(?:password|passwd|pwd|senha|passphrase|secret|api[_-]?key|access[_-]?token)\b[\"']?\s{0,3}[:=]\s{0,3}[\"']?"
        r"(?P<secret>(?=[^\s\"',;]{0,200}[\d\W])[^\s\"',;]{6,200})",
        score=0.9,
        ignore_case=True,
    ),
)


# Every credential pattern needs one of these (lower-cased) somewhere in the text:
# a text without any is not searched at all
CREDENTIAL_HINTS = (
    "sk-", "akia", "asia", "abia", "acca", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "aiza",
    "_live_", "_test_", "eyj", "private key", "://", "bearer", "basic", "token", "passw", "pwd", "senha",
    "passphrase", "secret", "apikey", "api_key", "api-key", "access_token", "access-token",
)  # fmt: skip


def may_hold_credential(text: str) -> bool:
    lower = text.lower()
    return any(hint in lower for hint in CREDENTIAL_HINTS)


def compiled(pattern: CredentialPattern) -> regex.Pattern:
    flags = regex.DOTALL | (regex.IGNORECASE if pattern.ignore_case else 0)
    return regex.compile(pattern.regex, flags)
