"""A labelled corpus: Faker values (en_US, pt_BR, en_GB) planted at every depth
of real trace documents, each planting recorded with its entity type.

Depths: user turns (English and Portuguese, with and without context words),
the system prompt, template variables, tool arguments (dicts, nested lists,
OpenAI-style JSON strings, integers), tool results (text, JSON-encoded
strings, dicts), retrieved documents, outputs, feedback and errors. The
documents are frozen-call v1 JSON, so ``pipelines.formats.frozen_call`` turns
them into canonical rows exactly as ingest does.

Alphanumeric CNPJs are generated here with their own check-digit code (not
the code under test), from the Receita Federal rule.
"""

from __future__ import annotations

import base64
import json
import random
import string
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import phonenumbers
from faker import Faker

from pipelines.redact.entities import CARD, CNPJ, CPF, CREDENTIAL, EMAIL, IBAN, IP, PERSON, PHONE, SSN

REGEX_TYPES = (EMAIL, PHONE, CARD, IBAN, IP, SSN, CPF, CNPJ, CREDENTIAL)

# The template store of the corpus: its system prompts were rendered from this, with a
# ``customer`` the capture did not record (the recorded variables are others)
TEMPLATES = {
    ("support-system", "v3"): "You are the support assistant for Acme. Customer on file: {{ customer }}",
}


def template_source(template_id: str, version: str) -> str | None:
    """``Redactor(templates=)`` for the corpus."""
    return TEMPLATES.get((template_id, version))


@dataclass(frozen=True)
class Planted:
    entity: str
    value: str | int
    where: str


@dataclass
class Corpus:
    documents: list[dict[str, Any]] = field(default_factory=list)
    planted: list[Planted] = field(default_factory=list)


def _cnpj_dv(base: str) -> str:
    """Receita Federal: value of each character is its ASCII code minus 48."""

    def digit(chars: str, weights: list[int]) -> int:
        total = sum((ord(c) - 48) * w for c, w in zip(chars, weights, strict=True))
        return 0 if total % 11 < 2 else 11 - total % 11

    w1 = [5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2]
    d1 = digit(base, w1)
    d2 = digit(base + str(d1), [6, *w1])
    return f"{d1}{d2}"


class Values:
    """Draws one value of an entity type, in a realistic surface form."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.en = Faker("en_US")
        self.pt = Faker("pt_BR")
        self.gb = Faker("en_GB")
        self.de = Faker("de_DE")
        for i, fake in enumerate((self.en, self.pt, self.gb, self.de)):
            fake.seed_instance(seed + i)

    def email(self) -> str:
        fake = self.rng.choice((self.en, self.pt, self.gb))
        value = self.rng.choice((fake.free_email, fake.company_email, fake.email))()
        return value.capitalize() if self.rng.random() < 0.1 else value

    def phone(self) -> str:
        while True:
            fake, region = self.rng.choice(((self.en, "US"), (self.pt, "BR"), (self.gb, "GB"), (self.pt, "BR")))
            raw = fake.cellphone_number() if region == "BR" and self.rng.random() < 0.5 else fake.phone_number()
            raw = raw.split("x")[0].strip()
            try:
                number = phonenumbers.parse(raw, region)
            except phonenumbers.NumberParseException:
                continue
            if not phonenumbers.is_valid_number(number):
                continue
            style = self.rng.random()
            if style < 0.25:
                return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
            if style < 0.5:
                return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.INTERNATIONAL)
            if style < 0.75:
                return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.NATIONAL)
            return raw

    def card(self) -> str:
        kind = self.rng.choice(
            ("visa13", "visa16", "visa19", "mastercard", "mastercard", "amex", "discover", "diners", "jcb15", "jcb16")
        )
        digits = self.en.credit_card_number(kind)
        style = self.rng.random()
        if style < 0.4 or len(digits) not in (15, 16, 19):
            return digits
        sep = " " if style < 0.7 else "-"
        if len(digits) == 15:
            return sep.join((digits[:4], digits[4:10], digits[10:]))
        return sep.join(digits[i : i + 4] for i in range(0, len(digits), 4))

    def iban(self) -> str:
        value = self.rng.choice((self.gb, self.pt, self.de)).iban()
        if self.rng.random() < 0.5:
            return " ".join(value[i : i + 4] for i in range(0, len(value), 4))
        return value

    def ip(self) -> str:
        return self.rng.choice((self.en.ipv4_public, self.en.ipv4_private, self.en.ipv6))()

    def ssn(self) -> str:
        while True:
            value = self.en.ssn()
            if value not in ("123-45-6789", "078-05-1120") and not value.startswith(("000", "666", "9")):
                return value

    def cpf(self) -> str:
        value = self.pt.cpf()
        return value if self.rng.random() < 0.7 else value.replace(".", "").replace("-", "")

    def cnpj(self) -> str:
        style = self.rng.random()
        if style < 0.3:
            chars = string.ascii_uppercase + string.digits
            base = "".join(self.rng.choice(chars) for _ in range(8)) + "".join(self.rng.choice(chars) for _ in range(4))
            full = base + _cnpj_dv(base)
            return f"{full[:2]}.{full[2:5]}.{full[5:8]}/{full[8:12]}-{full[12:]}"
        value = self.pt.cnpj()
        return value if style < 0.8 else "".join(c for c in value if c.isdigit())

    def credential(self) -> tuple[str, str]:
        """(value to redact, how it is written in text)."""
        rng = self.rng
        token_chars = string.ascii_letters + string.digits + "_-"
        kind = rng.randrange(7)
        if kind == 0:
            key = "sk-ant-api03-" + "".join(rng.choice(token_chars) for _ in range(93)) + "AA"
            return key, key
        if kind == 1:
            key = "sk-proj-" + "".join(rng.choice(token_chars) for _ in range(rng.randrange(48, 140))) + "9"
            return key, key
        if kind == 2:
            key = "sk-" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(47)) + "7"
            return key, key
        if kind == 3:
            key = "AKIA" + "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(16))
            return key, key
        if kind == 4:
            token = "".join(
                rng.choice(string.ascii_letters + string.digits + "._-") for _ in range(rng.randrange(24, 64))
            )
            return token, f"Bearer {token}"
        if kind == 5:

            def part(obj: dict) -> str:
                return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

            sig = base64.urlsafe_b64encode(rng.randbytes(32)).rstrip(b"=").decode()
            jwt = f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'sub': self.en.uuid4(), 'exp': 1767225600})}.{sig}"
            return jwt, jwt
        password = self.en.password(length=rng.randrange(10, 18), special_chars=False)
        user = self.en.user_name()
        return password, f"postgres://{user}:{password}@db.internal:5432/orders"

    def person(self) -> str:
        fake = self.rng.choice((self.en, self.pt))
        return f"{fake.first_name()} {fake.last_name()}"


# Sentences per entity: (English, Portuguese), with and without context words.
SENTENCES = {
    EMAIL: ("Please send the invoice to {v} today.", "Meu e-mail é {v}, pode mandar por lá?", "cc: {v}."),
    PHONE: ("You can call me at {v} after 5pm.", "Meu telefone é {v}, pode ligar.", "Contato: {v}.", "{v} (home)."),
    CARD: ("My card number is {v}, expiring 09/28.", "Paguei com o cartão {v} ontem.", "It was charged {v} twice."),
    IBAN: ("Wire it to IBAN {v} please.", "A conta para transferência: {v}.", "{v} is the account."),
    IP: ("The request came from {v} at midnight.", "O acesso veio do IP {v}.", "We blocked {v}."),
    SSN: ("My SSN is {v} if you need it.", "social security number {v}.", "SSN: {v}."),
    CPF: ("Meu CPF é {v}, pode conferir?", "My Brazilian CPF number is {v}.", "cadastro {v} ok."),
    CNPJ: ("O CNPJ da empresa é {v}.", "Company CNPJ: {v}.", "empresa {v} ativa."),
    CREDENTIAL: ("Here is the key I use: {v} - is it valid?", "Minha chave: {v}.", "conn = {v}"),
    PERSON: (
        "Hi, this is {v} and I need help with my order.",
        "Olá, meu nome é {v} e preciso de ajuda com o pedido.",
        "I spoke with {v} yesterday about the refund.",
        "A atendente {v} disse que o reembolso sai amanhã.",
    ),
}
# JSON keys for tool arguments: some name the entity, some say nothing
KEYS = {
    EMAIL: ("customer_email", "to", "recipient"),
    PHONE: ("contact_phone", "numero_whatsapp", "phone_number"),
    CARD: ("card", "payment_card", "value"),
    IBAN: ("iban", "destination_account", "account"),
    IP: ("client_ip", "source", "addr"),
    SSN: ("ssn", "tax_id", "document"),
    CPF: ("cpf", "documento", "customer_document"),
    CNPJ: ("cnpj", "company_id_number", "empresa"),
    CREDENTIAL: ("token", "connection", "config_value"),
    PERSON: ("customer_name", "nome", "full_name"),
}
NUMERIC = (CPF, CNPJ, CARD, PHONE)


def _as_number(value: str) -> int | None:
    """The value as a JSON integer, as an application might store it (no leading zero to lose)."""
    if any(c.isalpha() for c in value):
        return None
    digits = "".join(c for c in value if c.isdigit())
    return int(digits) if digits and digits[0] != "0" else None


class _Builder:
    def __init__(self, values: Values, rng: random.Random, entities: tuple[str, ...]):
        self.values = values
        self.rng = rng
        self.entities = entities
        self.planted: list[Planted] = []

    def draw(self, entity: str) -> tuple[str, str]:
        if entity == CREDENTIAL:
            return self.values.credential()
        value = getattr(self.values, {EMAIL: "email", PHONE: "phone", CARD: "card", IBAN: "iban", IP: "ip",
                                       SSN: "ssn", CPF: "cpf", CNPJ: "cnpj", PERSON: "person"}[entity])()  # fmt: skip
        return value, value

    def sentence(self, where: str) -> str:
        entity = self.rng.choice(self.entities)
        value, written = self.draw(entity)
        self.planted.append(Planted(entity, value, where))
        return self.rng.choice(SENTENCES[entity]).format(v=written)

    def paragraph(self, where: str, n: int) -> str:
        return " ".join(self.sentence(where) for _ in range(n))

    def argument(self, where: str, allow_numbers: bool = True) -> tuple[str, Any]:
        entity = self.rng.choice(self.entities)
        value, written = self.draw(entity)
        key = self.rng.choice(KEYS[entity])
        if allow_numbers and entity in NUMERIC and self.rng.random() < 0.4:
            number = _as_number(value)
            if number is not None and (entity != PHONE or "phone" in key or "whatsapp" in key):
                self.planted.append(Planted(entity, number, where + ":number"))
                return key, number
        self.planted.append(Planted(entity, value, where))
        return key, written


def build_corpus(traces: int = 120, seed: int = 7, entities: tuple[str, ...] = REGEX_TYPES) -> Corpus:
    rng = random.Random(seed)
    values = Values(seed)
    corpus = Corpus()
    start = datetime(2026, 11, 20, 9, tzinfo=UTC)
    for t in range(traces):
        b = _Builder(values, rng, entities)
        trace_id = f"trace-{seed}-{t:04d}"
        when = start + timedelta(minutes=7 * t)
        # first call: a user turn, answered with two tool calls
        user_turn = b.paragraph("user_turn", rng.randrange(2, 4))
        k1, v1 = b.argument("tool_args")
        k2, v2 = b.argument("tool_args_nested")
        k3, v3 = b.argument("tool_args_json_string", allow_numbers=False)
        system = "You are the support assistant for Acme. Customer on file: " + b.sentence("system_prompt")
        var_key, var_value = b.argument("template_variables", allow_numbers=False)
        tools = [{"name": "lookup_customer", "description": "Find a customer by any identifier.",
                  "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}]  # fmt: skip
        first_request = {
            "model": "claude-sonnet-4-5-20250929",
            "max_tokens": 1024,
            "system": system,
            "tools": tools,
            "messages": [{"role": "user", "content": user_turn}],
            "metadata": {"user_id": f"user-{t:05d}"},
        }
        tool_use = [
            {"type": "tool_use", "id": f"toolu_{t:04d}a", "name": "lookup_customer", "input": {k1: v1}},
            {"type": "tool_use", "id": f"toolu_{t:04d}b", "name": "lookup_customer",
             "input": {"filters": {"and": [{"field": k2, "eq": v2}]}}},
        ]  # fmt: skip
        doc1 = {
            "format": "tracelake.frozen_call",
            "version": 1,
            "trace_id": trace_id,
            "span_id": f"{trace_id}-1",
            "session_id": f"session-{t:04d}",
            "user_id": f"user-{t:05d}",
            "occurred_at": when.isoformat(),
            "service": "support-answer",
            "model": {"id": "claude-sonnet-4-5-20250929"},
            "prompt": {"template_id": "support-system", "version": "v3", "variables": {var_key: var_value}},
            "request": first_request,
            "response": {
                "id": f"msg_{t:04d}a",
                "model": "claude-sonnet-4-5-20250929",
                "content": [{"type": "text", "text": "Let me look that up."}, *tool_use],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 812, "output_tokens": 64},
            },
            # an OpenAI-style tool call whose arguments are a JSON string, kept as extra
            "openai_tool_calls": [
                {
                    "id": f"call_{t:04d}",
                    "type": "function",
                    "function": {"name": "lookup_customer", "arguments": json.dumps({k3: v3})},
                }
            ],  # fmt: skip
        }
        # second call: the tool results and a retrieved document, then the answer
        result_text = b.paragraph("tool_result_text", 2)
        rk, rv = b.argument("tool_result_json")
        result_blob = json.dumps({"customer": {rk: rv, "orders": 3, "since": "2021-04-01"}}, ensure_ascii=False)
        doc_text = b.paragraph("retrieved_document", 2)
        answer = b.paragraph("output", 2)
        second_request = {
            **first_request,
            "messages": [
                {"role": "user", "content": user_turn},
                {"role": "assistant", "content": tool_use},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{t:04d}a", "content": result_text},
                    {"type": "tool_result", "tool_use_id": f"toolu_{t:04d}b",
                     "content": [{"type": "text", "text": result_blob}]},
                ]},
            ],
        }  # fmt: skip
        ek, ev = b.argument("tool_execution_result")
        doc2 = {
            **{k: v for k, v in doc1.items() if k not in ("openai_tool_calls", "response", "request")},
            "span_id": f"{trace_id}-2",
            "occurred_at": (when + timedelta(seconds=4)).isoformat(),
            "request": second_request,
            "retrieval": {"query": "customer lookup", "doc_ids": [f"ticket-{t}"], "texts": [doc_text]},
            "tool_executions": [
                {
                    "tool_call_id": f"toolu_{t:04d}a",
                    "name": "lookup_customer",
                    "arguments": {k1: v1},
                    "result": {"match": result_text, ek: ev},
                },
            ],  # fmt: skip
            "response": {
                "id": f"msg_{t:04d}b",
                "model": "claude-sonnet-4-5-20250929",
                "content": [{"type": "text", "text": answer}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 1400, "output_tokens": 210},
            },
            "feedback": {"value": "down", "comment": b.sentence("feedback_comment")},
        }
        if t % 5 == 0:
            doc2["error"] = {"type": "validation_error", "message": "rejected input: " + b.sentence("error_message")}
        corpus.documents += [doc1, doc2]
        corpus.planted += b.planted
    return corpus


def person_corpus(sentences: int = 160, seed: int = 11) -> Corpus:
    """Names in natural language (user turns and outputs), for the NER comparison."""
    return build_corpus(traces=max(1, sentences // 14), seed=seed, entities=(PERSON,))
