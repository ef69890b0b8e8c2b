"""The presidio recognizers tracelake runs, and nothing else.

The registry is built from this list instead of presidio's defaults: the
stock US driver-licence, bank-account, passport, ITIN, medical-licence, NHS,
URL, date, UUID and crypto-wallet recognizers flood trace content (JSON
numbers, ids, file names) with low-score hits (see README.md).
"""

from __future__ import annotations

from functools import lru_cache

import phonenumbers
import regex
from presidio_analyzer import (
    EntityRecognizer,
    LocalRecognizer,
    Pattern,
    PatternRecognizer,
    RecognizerResult,
)
from presidio_analyzer.predefined_recognizers import (
    EmailRecognizer,
    IbanRecognizer,
    IpRecognizer,
    PhoneRecognizer,
    SpacyRecognizer,
    UsSsnRecognizer,
)

from pipelines.redact import check_digits, patterns
from pipelines.redact.email_domains import has_public_suffix
from pipelines.redact.entities import (
    CARD,
    CNPJ,
    CONTEXT,
    CPF,
    CREDENTIAL,
    EMAIL,
    IBAN,
    IP,
    PERSON,
    PHONE,
    SSN,
)


def _score_unformatted(results: list[RecognizerResult], text: str, score: float) -> list[RecognizerResult]:
    """A validated number written without punctuation is weaker evidence than a
    formatted one: an 11-digit run may be a phone that happens to pass the CPF check."""
    for result in results:
        if text[result.start : result.end].isalnum() and result.score > score:
            result.score = score
    return results


class OfflineEmailRecognizer(EmailRecognizer):
    """presidio's email recognizer, checking the domain against the bundled suffix list."""

    def validate_result(self, pattern_text: str) -> bool:
        return has_public_suffix(pattern_text)


class CpfRecognizer(PatternRecognizer):
    """Brazilian CPF: 11 digits whose last two are mod-11 check digits."""

    def __init__(self) -> None:
        super().__init__(
            supported_entity=CPF,
            name="CpfRecognizer",
            patterns=[
                Pattern("cpf_formatted", patterns.CPF_FORMATTED, 0.5),
                Pattern("cpf_plain", patterns.CPF_PLAIN, 0.3),
            ],
            context=list(CONTEXT[CPF]),
        )

    def validate_result(self, pattern_text: str) -> bool:
        return check_digits.is_valid_cpf(pattern_text)

    def analyze(self, text, entities, nlp_artifacts=None, regex_flags=None):
        return _score_unformatted(super().analyze(text, entities, nlp_artifacts, regex_flags), text, 0.7)


class CnpjRecognizer(PatternRecognizer):
    """Brazilian CNPJ, numeric or alphanumeric (check digits over ``ord(c) - 48``)."""

    def __init__(self) -> None:
        super().__init__(
            supported_entity=CNPJ,
            name="CnpjRecognizer",
            patterns=[
                Pattern("cnpj_formatted", patterns.CNPJ_FORMATTED, 0.5),
                Pattern("cnpj_plain", patterns.CNPJ_PLAIN, 0.3),
                Pattern("cnpj_alnum_plain", patterns.CNPJ_ALNUM_PLAIN, 0.2),
            ],
            context=list(CONTEXT[CNPJ]),
            # letters of an alphanumeric CNPJ are upper case; "abcdefgh0001" is a word
            global_regex_flags=0,
        )

    def validate_result(self, pattern_text: str) -> bool:
        return check_digits.is_valid_cnpj(pattern_text)

    def analyze(self, text, entities, nlp_artifacts=None, regex_flags=None):
        results = super().analyze(text, entities, nlp_artifacts, 0)
        for result in results:
            found = text[result.start : result.end]
            if found.isdigit():
                result.score = min(result.score, 0.8)
            elif found.isalnum():
                # an unformatted alphanumeric run needs a context word to count
                result.score = min(result.score, 0.3)
        return results


class CardRecognizer(PatternRecognizer):
    """Card numbers of every major scheme (2-series Mastercard, 19-digit Visa,
    Elo, Hipercard...), Luhn- and prefix-validated."""

    def __init__(self) -> None:
        super().__init__(
            supported_entity=CARD,
            name="CardRecognizer",
            patterns=[Pattern("card", patterns.CARD, 0.3)],
            context=list(CONTEXT[CARD]),
        )

    def validate_result(self, pattern_text: str) -> bool:
        return check_digits.is_valid_card(pattern_text)

    def analyze(self, text, entities, nlp_artifacts=None, regex_flags=None):
        return _score_unformatted(super().analyze(text, entities, nlp_artifacts, regex_flags), text, 0.8)


# "anthropic==1.2.3.4", "version 1.2.3.4", "orders:1.2.3.4", "upgrade to 1.2.3.4"
_VERSION_BEFORE = regex.compile(
    r"(?:[=<>~!]=|\bv|\bversions?\b\W{0,4}|\b(?:release|build|upgrade to|update to|bump to)\s+|\w:)$",
    regex.IGNORECASE,
)
_VERSION_AFTER = regex.compile(r"^\s*(?:release|build)\b", regex.IGNORECASE)
_NOT_PERSONAL = ("0.0.0.0", "255.255.255.255", "::", "::1")


class LongIpRecognizer(IpRecognizer):
    """presidio's IP recognizer minus what is not a person's address in trace
    content: short IPv6 forms (``1::2`` is a Python slice), loopback and
    unspecified addresses, and four-part version numbers."""

    def invalidate_result(self, pattern_text: str) -> bool:
        address = pattern_text.split("/")[0]
        if address in _NOT_PERSONAL or address.startswith("127."):
            return True
        if ":" in address and "." not in address:
            if len([g for g in address.split(":") if g]) < 3:
                return True
        return bool(super().invalidate_result(pattern_text))

    def analyze(self, text, entities, nlp_artifacts=None, regex_flags=None):
        results = super().analyze(text, entities, nlp_artifacts, regex_flags)
        return [
            r
            for r in results
            if not _VERSION_BEFORE.search(text[max(0, r.start - 24) : r.start])
            and not _VERSION_AFTER.match(text[r.end : r.end + 12])
        ]


@lru_cache(maxsize=65_536)
def _valid_in_any(number: str, regions: tuple[str, ...]) -> bool:
    for region in regions:
        try:
            if phonenumbers.is_valid_number(phonenumbers.parse(number, region)):
                return True
        except phonenumbers.NumberParseException:
            continue
    return False


# Where a phone number could be: 7+ digits with the punctuation numbers are written with
PHONE_CANDIDATE = regex.compile(r"(?:\+|\b)[\d(][\d \t().\-/]{5,24}\d")
_MARGIN = 24


class TracePhoneRecognizer(PhoneRecognizer):
    """presidio's phone recognizer, minus digit runs that are part of an
    identifier (``claude-sonnet-4-5-20250929``); a run of bare digits, with no
    "+" or punctuation, needs a context word ("ts=1732012345" is a time). A
    number that is only *possible* for its region (people mistype, and test
    data uses unassigned area codes) counts when a context word is near:
    "call me at (462) 650-2815".

    python-phonenumbers' matcher is pure Python and slow on long texts (12 s
    on a 320 KB JSON array of floats): it only runs on the few windows that
    look like a written number."""

    POSSIBLE_SCORE = 0.2

    def __init__(self, **kwargs):
        super().__init__(leniency=phonenumbers.Leniency.POSSIBLE, **kwargs)

    def _is_valid(self, number: str) -> bool:
        return _valid_in_any(number, tuple(self.supported_regions))

    def _windows(self, text: str):
        """Candidate spans widened by a margin and merged, so the matcher sees
        each number with the text around it, as it would in the whole text."""
        start = end = -1
        for candidate in PHONE_CANDIDATE.finditer(text):
            if sum(c.isdigit() for c in candidate.group()) < 7:
                continue
            lo, hi = max(candidate.start() - _MARGIN, 0), min(candidate.end() + _MARGIN, len(text))
            if lo <= end:
                end = max(end, hi)
                continue
            if end > start:
                yield start, text[start:end]
            start, end = lo, hi
        if end > start:
            yield start, text[start:end]

    def analyze(self, text, entities, nlp_artifacts=None):
        results = []
        for offset, window in self._windows(text):
            for result in super().analyze(window, entities, None):
                result.start += offset
                result.end += offset
                results.append(result)
        kept = []
        for result in EntityRecognizer.remove_duplicates(results):
            before = text[result.start - 1] if result.start > 0 else " "
            after = text[result.end] if result.end < len(text) else " "
            if before.isalnum() or before in "-_./=#" or after.isalnum() or after in "-_/":
                continue
            found = text[result.start : result.end]
            if not self._is_valid(found):
                if found.isdigit():
                    continue  # neither valid nor written like a phone number: an id, a count
                result.score = self.POSSIBLE_SCORE
            elif found.isdigit():
                result.score = min(result.score, 0.3)
            kept.append(result)
        return kept


class CredentialRecognizer(LocalRecognizer):
    """API keys (Anthropic, OpenAI, AWS, GitHub, Slack, Google, Stripe), JWTs,
    bearer/basic tokens, private keys and passwords in URLs or assignments.
    A pattern's ``secret`` group, when it has one, is all that is reported."""

    def __init__(self) -> None:
        self._compiled = [(p, patterns.compiled(p)) for p in patterns.CREDENTIALS]
        super().__init__(supported_entities=[CREDENTIAL], name="CredentialRecognizer")

    def load(self) -> None:
        pass

    def analyze(self, text, entities, nlp_artifacts=None):
        results = []
        for pattern, compiled in self._compiled:
            for match in compiled.finditer(text):
                group = "secret" if "secret" in compiled.groupindex else 0
                start, end = match.span(group)
                if start == end:
                    continue
                results.append(
                    RecognizerResult(
                        CREDENTIAL,
                        start,
                        end,
                        pattern.score,
                        recognition_metadata={
                            RecognizerResult.RECOGNIZER_NAME_KEY: self.name,
                            RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id,
                        },
                    )
                )
        return EntityRecognizer.remove_duplicates(results)


def build_recognizers(phone_regions: tuple[str, ...], ner: bool) -> list[EntityRecognizer]:
    recognizers: list[EntityRecognizer] = [
        OfflineEmailRecognizer(context=list(CONTEXT[EMAIL])),
        TracePhoneRecognizer(context=list(CONTEXT[PHONE]), supported_regions=phone_regions),
        CardRecognizer(),
        IbanRecognizer(context=list(CONTEXT[IBAN])),
        LongIpRecognizer(context=list(CONTEXT[IP])),
        UsSsnRecognizer(context=list(CONTEXT[SSN])),
        CpfRecognizer(),
        CnpjRecognizer(),
        CredentialRecognizer(),
    ]
    if ner:
        recognizers.append(SpacyRecognizer(supported_entities=[PERSON]))
    return recognizers


# Recognizers presidio ships that tracelake leaves out, and why (README.md).
DROPPED = {
    "UsLicenseRecognizer": "US driver licence: thousands of low-score hits on numeric JSON",
    "UsBankRecognizer": "US bank account: any 8-17 digit run",
    "UsPassportRecognizer": "US passport: any 9 digit run",
    "UsItinRecognizer": "US ITIN: 9 digit runs; rare in traces",
    "MedicalLicenseRecognizer": "medical licence: two letters and digits, matches ids",
    "NhsRecognizer": "UK NHS number: 10 digit runs",
    "UrlRecognizer": "URL: file names (setup.py, README.md) and model ids",
    "DateRecognizer": "dates: timestamps are everywhere in traces and are not personal",
    "UuidRecognizer": "UUID: ids, never personal data by themselves",
    "CryptoRecognizer": "crypto wallets: base58 runs inside ids and hashes",
    "spaCy LOCATION / ORGANIZATION / NRP / DATE_TIME": "NER labels other than PERSON: product and model names",
}
