"""The entity types tracelake redacts, and the words that make a match more likely.

Context words are English and Brazilian Portuguese; they count when they
appear a few words before a match or in the JSON key that holds the value
(``{"telefone": 11987654321}``). Kept free of presidio imports so the policy
and the walker can use it without loading the analyzer.
"""

from __future__ import annotations

EMAIL = "EMAIL_ADDRESS"
PHONE = "PHONE_NUMBER"
CARD = "CREDIT_CARD"
IBAN = "IBAN_CODE"
IP = "IP_ADDRESS"
SSN = "US_SSN"
CPF = "BR_CPF"
CNPJ = "BR_CNPJ"
CREDENTIAL = "CREDENTIAL"
PERSON = "PERSON"
# No recognizer finds addresses in free text well enough offline: they are
# replaced where a key says so (``address``, ``endereco``...), and wherever else
# that value appears in the trace.
ADDRESS = "ADDRESS"

ENTITIES = (EMAIL, PHONE, CARD, IBAN, IP, SSN, CPF, CNPJ, CREDENTIAL, PERSON, ADDRESS)
# Entities whose matches are unambiguous enough to look for even inside
# values the walker otherwise leaves alone (ids, types, model names): an email
# used as a user id is still an email, and so is a CPF under "tax_id" when
# written with its punctuation (a bare 11-digit id passes the CPF check 1 time in 100).
UNAMBIGUOUS = (EMAIL, CREDENTIAL)
UNAMBIGUOUS_WHEN_FORMATTED = (CPF, CNPJ, SSN, CARD)

CONTEXT: dict[str, tuple[str, ...]] = {
    EMAIL: ("email", "mail", "e-mail", "correio"),
    PHONE: (
        "phone",
        "telephone",
        "tel",
        "cell",
        "cellphone",
        "mobile",
        "call",
        "reach",
        "dial",
        "ring",
        "sms",
        "whatsapp",
        "fax",
        "telefone",
        "celular",
        "fone",
        "contato",
        "zap",
        "ligar",
        "ligue",
        "numero",
        "número",
        "home",
        "casa",
        "fixo",
        "residencial",
        "comercial",
    ),
    CARD: ("credit", "card", "visa", "mastercard", "amex", "discover", "jcb", "diners", "maestro", "cartao", "cartão"),
    IBAN: ("iban", "bank", "transfer", "banco", "conta"),
    IP: ("ip", "ipv4", "ipv6"),
    SSN: ("ssn", "ssns", "social", "security"),
    CPF: ("cpf", "contribuinte", "documento"),
    CNPJ: ("cnpj", "empresa", "company"),
    CREDENTIAL: (),
    PERSON: (),
    ADDRESS: (),
}

VOCABULARY = frozenset(word for words in CONTEXT.values() for word in words)


def context_forms(word: str) -> set[str]:
    """The forms of a token or key that may name a context word:
    ``Phone_Numbers`` -> {"phone_numbers", "phone", "numbers", "number", ...}."""
    lower = word.lower().strip()
    forms = {lower}
    for sep in ("_", "-", ":", ".", "/"):
        lower = lower.replace(sep, " ")
    for part in lower.split():
        forms.add(part)
        if part.endswith("s") and len(part) > 3:
            forms.add(part[:-1])
    return forms
