"""The analyzer on single texts: what each recognizer must find, and what it must leave."""

from __future__ import annotations

import socket

import pytest

from pipelines.redact import check_digits
from pipelines.redact.analyzer import AnalysisError, Request, TextAnalyzer
from pipelines.redact.policy import load_policy
from pipelines.redact.recognizers import DROPPED, build_recognizers
from pipelines.redact.redactor import detector_settings


@pytest.fixture(scope="module")
def analyzer() -> TextAnalyzer:
    return TextAnalyzer(detector_settings(load_policy(), ner=False))


def found(analyzer: TextAnalyzer, text: str, **kwargs) -> list[tuple[str, str]]:
    return [(h.entity, text[h.start : h.end]) for h in analyzer.analyze(Request(text, **kwargs))]


def luhn(prefix: str, length: int) -> str:
    body = prefix + "7" * (length - len(prefix) - 1)
    return body + check_digits.luhn_check_digit(body)


def cnpj_dv(base: str) -> str:
    """Independent of the code under test: Receita Federal's rule, ASCII - 48."""

    def digit(chars, weights):
        total = sum((ord(c) - 48) * w for c, w in zip(chars, weights, strict=True))
        return 0 if total % 11 < 2 else 11 - total % 11

    w = [5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2]
    d1 = digit(base, w)
    return f"{d1}{digit(base + str(d1), [6, *w])}"


@pytest.mark.parametrize(
    "text, entity, value",
    [
        ("Meu CPF é 529.982.247-25, ok?", "BR_CPF", "529.982.247-25"),
        ("cpf 52998224725", "BR_CPF", "52998224725"),
        ("CNPJ 11.222.333/0001-81 ativo", "BR_CNPJ", "11.222.333/0001-81"),
        ("cnpj: 11222333000181", "BR_CNPJ", "11222333000181"),
        ("paid with 2221 0000 0000 0009 today", "CREDIT_CARD", "2221 0000 0000 0009"),
        ("amex 3782-822463-10005", "CREDIT_CARD", "3782-822463-10005"),
        ("visa 4111111111111111 please", "CREDIT_CARD", "4111111111111111"),
        ("wire to GB82 WEST 1234 5698 7654 32 now", "IBAN_CODE", "GB82 WEST 1234 5698 7654 32"),
        ("came from 203.0.113.77 yesterday", "IP_ADDRESS", "203.0.113.77"),
        ("ipv6 2001:db8:85a3::8a2e:370:7334 seen", "IP_ADDRESS", "2001:db8:85a3::8a2e:370:7334"),
        ("my SSN is 536-22-1234", "US_SSN", "536-22-1234"),
        ("mail joao.silva@empresa.com.br hoje", "EMAIL_ADDRESS", "joao.silva@empresa.com.br"),
        ("ligue (11) 98765-4321 amanhã", "PHONE_NUMBER", "(11) 98765-4321"),
        ("whatsapp +55 11 98765-4321", "PHONE_NUMBER", "+55 11 98765-4321"),
        ("meu celular 11987654321", "PHONE_NUMBER", "11987654321"),
        ("call me on (212) 555-0187 tonight", "PHONE_NUMBER", "(212) 555-0187"),
        ("ring +44 20 7946 0958 at the office", "PHONE_NUMBER", "+44 20 7946 0958"),
    ],
)
def test_finds(analyzer, text, entity, value):
    assert (entity, value) in found(analyzer, text, natural_language=True)


def test_nineteen_digit_visa_and_two_series_mastercard(analyzer):
    visa19 = luhn("4", 19)
    mastercard = luhn("2720", 16)
    assert found(analyzer, f"card {visa19} and {mastercard}") == [("CREDIT_CARD", visa19), ("CREDIT_CARD", mastercard)]


def test_check_digits_decide(analyzer):
    assert found(analyzer, "CPF 529.982.247-24") == []  # one check digit off
    assert found(analyzer, "CPF 111.111.111-11") == []  # valid digits, never issued
    assert found(analyzer, "card 4111111111111112") == []  # Luhn fails
    assert found(analyzer, "CNPJ 11.222.333/0001-82") == []


def test_alphanumeric_cnpj(analyzer):
    base = "12ABC34501DE"
    good = f"{base[:2]}.{base[2:5]}.{base[5:8]}/{base[8:]}-{cnpj_dv(base)}"
    bad = good[:-1] + str((int(good[-1]) + 1) % 10)
    assert found(analyzer, f"CNPJ {good}") == [("BR_CNPJ", good)]
    assert found(analyzer, f"CNPJ {bad}") == []
    plain = base + cnpj_dv(base)
    assert found(analyzer, f"o cnpj é {plain}") == [("BR_CNPJ", plain)]
    assert found(analyzer, f"sku {plain}") == []  # a bare alphanumeric run needs a context word


@pytest.mark.parametrize(
    "text, secret",
    [
        ("key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcdEFGH-AA done", None),
        ("OPENAI_API_KEY=sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123456789abcd", None),
        ("aws AKIAIOSFODNN7EXAMPLE here", None),
        ("Authorization: Bearer abcDEF123456ghiJKL789.xyz", "abcDEF123456ghiJKL789.xyz"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", None),
        ("DATABASE_URL=postgres://orders:Hunter2Secret@db.internal:5432/orders", "Hunter2Secret"),
        ('{"password": "c0rrect-h0rse"}', "c0rrect-h0rse"),
    ],
)
def test_credentials(analyzer, text, secret):
    hits = found(analyzer, text)
    assert [entity for entity, _ in hits] == ["CREDENTIAL"]
    if secret is not None:
        assert hits[0][1] == secret  # only the secret, the rest stays readable


@pytest.mark.parametrize(
    "text",
    [
        "model claude-sonnet-4-5-20250929 and gpt-4o-2024-08-06",
        "pip install anthropic==1.2.3.4 and docker image orders:10.0.0.1",
        "version 1.2.3.4 shipped",
        "server listening on 127.0.0.1:8080 and 0.0.0.0",
        "evens = values[1::2]",
        "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "at 2025-11-03T14:05:09+00:00 (epoch 1762178709, ms 1762178709123)",
        "see setup.py and README.md; run id 7f1c1e8e-8d44-4a43-9d7b-0c5b1d8e2f10",
        "request req_011CUa2b3c4d5e6f7g8h9i0j and toolu_01A09q90qw90lq917835lq9",
    ],
)
def test_leaves_trace_content_alone(analyzer, text):
    assert found(analyzer, text, natural_language=True) == []


def test_bare_digits_need_context_to_be_a_phone(analyzer):
    assert found(analyzer, "ts=1732012345 processed") == []
    assert found(analyzer, "telefone 1732012345") == [("PHONE_NUMBER", "1732012345")]


def test_numbers_need_validation_or_a_key(analyzer):
    assert found(analyzer, "52998224725", number=True) == [("BR_CPF", "52998224725")]
    assert found(analyzer, "11987654321", number=True) == []  # a phone? a counter? no key says
    assert found(analyzer, "11987654321", number=True, context=("phone",)) == [("PHONE_NUMBER", "11987654321")]
    assert found(analyzer, "5511987654321", number=True, context=("whatsapp",)) == [("PHONE_NUMBER", "5511987654321")]


def test_ids_are_only_searched_for_unambiguous_values(analyzer):
    assert found(analyzer, "ana@example.org", restricted=True) == [("EMAIL_ADDRESS", "ana@example.org")]
    assert found(analyzer, "529.982.247-25", restricted=True) == [("BR_CPF", "529.982.247-25")]
    assert found(analyzer, "52998224725", restricted=True) == []  # bare digits in an id field: an id


def test_no_flooding_recognizers_are_loaded():
    names = {type(r).__name__ for r in build_recognizers(("BR", "US", "GB"), ner=False)}
    dropped = {name for name in DROPPED if not name.startswith("spaCy")}
    assert names.isdisjoint(dropped)
    assert {"UsLicenseRecognizer", "UrlRecognizer", "UsBankRecognizer", "NhsRecognizer"} <= dropped


def test_large_numeric_fields_are_cheap_and_clean(analyzer):
    # the shape that made presidio's own context enhancer quadratic (field notes)
    floats = "[" + ", ".join(f"{(i * 7919) % 100000 / 1000:.3f}" for i in range(40_000)) + "]"
    assert len(floats) > 300_000
    assert found(analyzer, floats) == []


def test_analysis_errors_never_quote_the_text(analyzer, monkeypatch):
    secret = "maria.silva@gmail.com"

    def boom(text, **kwargs):
        raise ValueError(f"cannot handle {text}")

    monkeypatch.setattr(analyzer.engine, "analyze", boom)
    with pytest.raises(AnalysisError) as error:
        analyzer.analyze(Request(f"write to {secret}"))
    assert secret not in str(error.value) and "ValueError" in str(error.value)


def test_builds_and_runs_without_network(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("the analyzer tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    analyzer = TextAnalyzer()
    assert found(analyzer, "email ana@empresa.com.br") == [("EMAIL_ADDRESS", "ana@empresa.com.br")]


# digits of other scripts: Arabic-Indic, fullwidth (what a CJK input method types), Devanagari
OTHER_DIGITS = {
    "arabic-indic": str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"),
    "fullwidth": str.maketrans("0123456789", "０１２３４５６７８９"),
    "devanagari": str.maketrans("0123456789", "०१२३४५६७८९"),
}
DIGIT_VALUES = ["529.982.247-25", "52998224725", "11.222.333/0001-81", "4111 1111 1111 1111", "4111111111111111",
                "(11) 98765-4321", "SSN 536-90-4399"]  # fmt: skip


@pytest.mark.parametrize("script", OTHER_DIGITS)
def test_a_number_written_in_another_scripts_digits_is_found_as_in_ascii_digits(analyzer, script):
    digits = OTHER_DIGITS[script]
    for value in DIGIT_VALUES:
        text = f"Olá, o número é {value}, obrigado."
        expected = [(entity, match.translate(digits)) for entity, match in found(analyzer, text, natural_language=True)]
        assert expected, value
        assert found(analyzer, text.translate(digits), natural_language=True) == expected
        # mixed with ASCII digits in one text, each at its own place
        mixed = f"{value} e {value.translate(digits)}"
        assert [m for _, m in found(analyzer, mixed, natural_language=True)] == [
            *(m for _, m in found(analyzer, value, natural_language=True)),
            *(m for _, m in expected),
        ]
    invalid = "529.982.247-26".translate(digits)  # wrong check digits, whatever the script
    assert found(analyzer, f"cpf {invalid}", natural_language=True) == []
