"""The ingredient stores the demo application renders its prompts from, and
the changes life makes to them afterwards.

Layout (a folder or an S3 prefix), which the rot check's store resources read:

    templates/<template_id>/<version>.j2      Jinja2 source of one template version
    templates/<template_id>/<version>.yaml    optional: tools for that version
    documents/snapshots/<snapshot>.json       {doc_id: text} for one index snapshot
    documents/current.json                    {"snapshot": "<name>"}
    models.yaml                               alias -> dated snapshots with effective_from / effective_to
    params.yaml                               route -> current request params

``capture_time_stores()`` is the state every demo trace was rendered from.
``aged_stores()`` is the same stores after life happened: a template version
edited in place, an index rebuilt with one document changed and one deleted,
a model alias moved to a newer snapshot. The `support-triage` template prints
today's date, so its calls never re-render the same way twice.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import yaml

SUPPORT_TEMPLATE = "support-answer"
TRIAGE_TEMPLATE = "support-triage"
AGENT_TEMPLATE = "agent-orders"
KB_TEMPLATE = "kb-answer"

KB_SNAPSHOT = "kb-2026-10-01"
KB_REBUILT = "kb-2026-11-30"
CHANGED_DOC = "kb-refunds-02"
DELETED_DOC = "kb-shipping-03"
EDITED_VERSION = "v2"

SUPPORT_ALIAS = "support-default"
AGENT_ALIAS = "agent-default"
SONNET = "claude-sonnet-4-5-20250929"
SONNET_NEXT = "claude-sonnet-4-6-20261015"
HAIKU = "claude-haiku-4-5-20251001"

_SUPPORT_V1 = """You are the customer support assistant of {{ company }}.
Answer in {{ language_name }}. Be brief and accurate.
Use only the documents below; if they do not answer the question, say so.
{% for d in documents %}
<document id="{{ d.doc_id }}">
{{ d.text }}
</document>
{% endfor %}"""

_SUPPORT_V2 = """You are {{ company }}'s support assistant, talking to a {{ customer_tier }} customer.
Reply in {{ language_name }}. Cite the document ids you used in square brackets.
Never promise a refund the policy does not allow.
{% for d in documents %}
<document id="{{ d.doc_id }}">
{{ d.text }}
</document>
{% endfor %}"""

# what someone changed v2 to, in place, without bumping the version
_SUPPORT_V2_EDITED = _SUPPORT_V2.replace("Never promise a refund", "Do not promise any refund or credit")

_SUPPORT_V3 = """You are {{ company }}'s support assistant. The customer is on the {{ customer_tier }} plan
and writes in {{ language_name }}; reply in the same language.
Ground every statement in the documents below and cite their ids like [kb-...].
If the customer shares card numbers or passwords, tell them not to.
{% for d in documents %}
<document id="{{ d.doc_id }}" score="{{ '%.3f' | format(d.score) }}">
{{ d.text }}
</document>
{% endfor %}"""

# The same templates printing no per-call values (no retrieval score, no date): the
# demo day `generate(..., per_call_values=False)` writes, on which every call of an
# ingredient set renders the same prompt (bench/rot.py measures both).
_SUPPORT_V3_UNSCORED = _SUPPORT_V3.replace(" score=\"{{ '%.3f' | format(d.score) }}\"", "")

_TRIAGE_V1 = """Classify the support message into one of: billing, shipping, account, other.
Today is {{ now().strftime('%A, %d %B %Y') }}; messages about orders older than 30 days go to billing.
Answer with the label only."""

_TRIAGE_V1_UNDATED = _TRIAGE_V1.replace("Today is {{ now().strftime('%A, %d %B %Y') }}; messages", "Messages")

_AGENT_V1 = """You are the orders agent of {{ company }}. Use the tools to look up orders and issue refunds.
Refunds above {{ refund_limit }} {{ currency }} need a human: escalate them.
Reply in {{ language_name }}."""

AGENT_TOOLS = [
    {
        "name": "lookup_order",
        "description": "Find an order by id or by the customer's email.",
        "input_schema": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "email": {"type": "string"}},
        },
    },
    {
        "name": "issue_refund",
        "description": "Refund an order, fully or partly, to the original payment method.",
        "input_schema": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
            "required": ["order_id", "amount"],
        },
    },
]

_KB = {
    "kb-refunds-01": "Refunds are issued to the original payment method within 5 business days of approval.",
    "kb-refunds-02": "Orders can be refunded in full within 30 days of delivery. After 30 days, store credit only.",
    "kb-refunds-03": "Duplicate charges are reversed automatically within 48 hours; no action is needed.",
    "kb-shipping-01": "Standard shipping takes 3 to 7 business days. Express shipping takes 1 to 2 business days.",
    "kb-shipping-02": "Tracking numbers are emailed when the order leaves the warehouse.",
    "kb-shipping-03": "International orders may be held at customs for up to 10 days.",
    "kb-account-01": "Passwords can be reset from the sign-in page with the 'Forgot password' link.",
    "kb-account-02": "Two-factor authentication can be enabled under Settings > Security.",
    "kb-account-03": "Accounts inactive for 24 months are closed after an email notice.",
    "kb-billing-01": "Invoices are available under Billing > History for the last 36 months.",
    "kb-billing-02": "Plan changes take effect at the start of the next billing cycle.",
    "kb-billing-03": "VIP customers have a dedicated line and priority handling of disputes.",
    "kb-pt-reembolso-01": "Reembolsos são feitos no meio de pagamento original em até 5 dias úteis.",
    "kb-pt-entrega-01": "A entrega padrão leva de 3 a 7 dias úteis; a expressa, de 1 a 2 dias úteis.",
    "kb-pt-conta-01": "A senha pode ser redefinida na página de login, em 'Esqueci minha senha'.",
}

# -- the long-prompt route (support.kb, pipelines/demo/kb.py): ~900 tokens of instructions, six
# ~600-token articles per topic, three tools: a ~5,000-token prefix the calls of a topic share

_KB_RULES = [
    "Read the whole question before answering, and answer the question that was asked, not a nearby one.",
    "Use only the articles below. When they do not cover the question, say so plainly and offer to open a ticket.",
    "Cite the id of every article you used in square brackets at the end of the sentence that relies on it.",
    "Quote amounts, dates and time limits exactly as the articles give them; never round or estimate them.",
    "When two articles disagree, follow the one with the lower rank number and mention that the other differs.",
    "Answer in the language the customer wrote in, whatever the language of the articles.",
    "Keep answers under one hundred and twenty words unless the customer asks for step-by-step instructions.",
    "Give steps as a numbered list, one action per step, in the order the customer will take them.",
    "Never ask for a full card number, a password, a one-time code or a government identity number.",
    "If the customer shares a card number, a password or an identity number, tell them not to share it again.",
    "Do not promise refunds, credits or delivery dates that the articles do not promise.",
    "Do not speculate about the cause of a charge, a delay or a locked account; say what the articles say.",
    "Use the lookup_order tool before you describe the state of a specific order, and only for that order.",
    "Use the open_ticket tool when the articles say a person must act, and tell the customer the ticket id.",
    "Use the escalate tool for legal threats, safety issues, chargebacks and anything about a minor.",
    "After a tool result, base the answer on that result; if it is empty, say that nothing was found.",
    "Never invent order numbers, tracking numbers, ticket ids or names that no tool or article gave you.",
    "Be warm and brief: thank the customer once, at the start, and do not repeat the question back to them.",
    "Avoid internal terms such as queue names, system names or policy codes; use the words customers use.",
    "If the customer is upset, acknowledge it in one short sentence and move on to what can be done.",
    "If the customer asks for a human, open a ticket and say when a person will reply, as the articles say.",
    "Business customers on an annual plan have the same rights as others unless an article says otherwise.",
    "For a question about more than one order, answer for each order separately and say which is which.",
    "When an article gives a deadline counted in business days, do not count weekends or public holidays.",
    "Mention a fee only when an article names it, and give its amount and when it applies.",
    "Do not mention competitors, other retailers or marketplaces, even when the customer mentions them.",
    "Do not give legal, tax or medical advice; point to the relevant article or offer to open a ticket.",
    "End with one sentence that says what happens next, who does it, and by when if an article says so.",
    "When the customer writes about a gift, do not reveal prices or order contents to anyone but the buyer.",
    "When an article describes a form or a page, name the page and the button the customer needs, not a link.",
    "If a question mixes topics, answer the billing part first, then shipping, then the account part.",
    "Do not close the conversation yourself; the customer decides when the question is answered.",
]
KB_V1 = (
    "You are {{ company }}'s support assistant for account, billing and shipping questions.\n"
    "Follow these rules in every answer:\n"
    + "\n".join(f"{i}. {rule}" for i, rule in enumerate(_KB_RULES, start=1))
    + '\n{% for d in documents %}<document id="{{ d.doc_id }}">\n{{ d.text }}\n</document>\n{% endfor %}'
)
KB_TOOLS = [
    {
        "name": "lookup_order",
        "description": "Look up one order by its id: items, payment, shipping status and tracking, refunds issued.",
        "input_schema": {
            "type": "object",
            "properties": {"order_id": {"type": "string", "description": "The order id, as the customer gave it"}},
            "required": ["order_id"],
        },
    },
    {
        "name": "open_ticket",
        "description": "Open a ticket for a person on the support team to act on; returns the ticket id.",
        "input_schema": {
            "type": "object",
            "properties": {
                "topic": {"type": "string", "enum": ["billing", "shipping", "account", "other"]},
                "summary": {"type": "string", "description": "What the customer needs, in one sentence"},
                "priority": {"type": "string", "enum": ["normal", "high"]},
            },
            "required": ["topic", "summary"],
        },
    },
    {
        "name": "escalate",
        "description": "Hand the conversation to a senior agent at once (legal, safety, chargebacks, minors).",
        "input_schema": {
            "type": "object",
            "properties": {"reason": {"type": "string"}},
            "required": ["reason"],
        },
    },
]
_KB_SENTENCES = {
    "billing": [
        "a charge appears on the statement on the day the order ships, not on the day it is placed",
        "a pending authorisation that is not captured drops off the statement within seven business days",
        "duplicate charges caused by a retried payment are reversed automatically within two business days",
        "refunds go back to the original payment method and take up to five business days to appear",
        "store credit never expires and can be combined with a discount code at checkout",
        "invoices list the tax rate of the delivery address and can be downloaded from the billing page",
        "a change of plan takes effect at the start of the next billing cycle, with no fee",
        "annual plans are billed once a year and can be cancelled with a prorated refund in the first month",
        "a failed card payment is retried three times over five days before the subscription pauses",
        "gift cards cannot be refunded, but an order paid with one is refunded as store credit",
        "partial refunds are issued for missing items once the warehouse confirms the shortfall",
        "price adjustments are given when the same item drops in price within fourteen days of purchase",
    ],
    "shipping": [
        "standard delivery takes three to seven business days from the day the order leaves the warehouse",
        "express delivery takes one to two business days for orders placed before two in the afternoon",
        "a tracking link is emailed when the parcel is handed to the carrier, usually within a day",
        "international parcels can be held at customs for up to ten days, and duties are paid on delivery",
        "a parcel marked delivered but not received can be reported after forty-eight hours",
        "the delivery address can be changed until the order is packed, from the order page",
        "orders above the free-shipping threshold ship at no cost with standard delivery",
        "a carrier makes two delivery attempts before the parcel goes to a pickup point for seven days",
        "parcels returned to the warehouse as undeliverable are refunded, less the shipping fee",
        "large items ship by freight and the carrier calls to book a delivery window",
        "split shipments are sent when items come from different warehouses, at no extra cost",
        "a lost parcel is replaced or refunded once the carrier confirms the loss, within ten days",
    ],
    "account": [
        "a password can be reset from the sign-in page, and the reset link stays valid for one hour",
        "two-factor authentication can be turned on under security settings with an authenticator app",
        "after five failed sign-in attempts the account locks for thirty minutes",
        "the email address of an account can be changed once it is confirmed from the new address",
        "an account can be closed from privacy settings, and its data is deleted within thirty days",
        "a copy of the account data can be requested and is ready to download within seven days",
        "marketing emails can be turned off without affecting order and security emails",
        "accounts inactive for twenty-four months are closed after an email notice",
        "a business account can add up to ten users, each with their own sign-in",
        "saved cards are stored by the payment provider, and only the last four digits are shown",
        "sign-in from a new device sends a notice email with the time and the approximate location",
        "a shared family account is not supported; each person needs their own account",
    ],
}
KB_ARTICLE_CHARS = 2_400  # about 600 tokens


def _article(topic: str, number: int) -> str:
    """A knowledge-base article of about 600 tokens, the same on every run."""
    pool = _KB_SENTENCES[topic]
    rng = random.Random(f"kb-article|{topic}|{number}")
    parts: list[str] = []
    while sum(len(p) + 2 for p in parts) < KB_ARTICLE_CHARS:
        sentence = rng.choice(pool)
        parts.append(sentence[0].upper() + sentence[1:] + ".")
    return " ".join(parts)


KB_TOPICS = {topic: [f"kb-{topic}-article-{n:02d}" for n in range(1, 7)] for topic in _KB_SENTENCES}
KB_ARTICLES = {doc_id: _article(topic, n) for topic, ids in KB_TOPICS.items() for n, doc_id in enumerate(ids)}

TOPICS = {
    "billing": ["kb-refunds-01", "kb-refunds-02", "kb-refunds-03", "kb-billing-01", "kb-billing-02", "kb-billing-03"],
    "shipping": ["kb-shipping-01", "kb-shipping-02", "kb-shipping-03"],
    "account": ["kb-account-01", "kb-account-02", "kb-account-03"],
}
TOPICS_PT = {
    "billing": ["kb-pt-reembolso-01", "kb-refunds-02", "kb-refunds-03"],
    "shipping": ["kb-pt-entrega-01", "kb-shipping-03", "kb-shipping-02"],
    "account": ["kb-pt-conta-01", "kb-account-02"],
}

PARAMS = {
    "support.answer": {"max_tokens": 1024, "temperature": 0.3},
    "support.kb": {"max_tokens": 400, "temperature": 0.3},
    "support.triage": {"max_tokens": 16, "temperature": 0.0},
    "agent.orders": {"max_tokens": 2048, "temperature": 0.2},
}


@dataclass
class Stores:
    """Everything in an ingredient store, in memory."""

    templates: dict[str, dict[str, str]] = field(default_factory=dict)
    template_tools: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    snapshots: dict[str, dict[str, str]] = field(default_factory=dict)
    current_snapshot: str = KB_SNAPSHOT
    aliases: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    params: dict[str, dict[str, Any]] = field(default_factory=dict)

    def files(self) -> dict[str, bytes]:
        """The store as files: relative path -> bytes."""
        out: dict[str, bytes] = {}
        for template_id, versions in self.templates.items():
            for version, source in versions.items():
                out[f"templates/{template_id}/{version}.j2"] = source.encode()
        for template_id, versions in self.template_tools.items():
            for version, tools in versions.items():
                out[f"templates/{template_id}/{version}.yaml"] = _yaml({"tools": tools})
        for name, docs in self.snapshots.items():
            out[f"documents/snapshots/{name}.json"] = json.dumps(docs, indent=1, ensure_ascii=False).encode()
        out["documents/current.json"] = json.dumps({"snapshot": self.current_snapshot}).encode()
        out["models.yaml"] = _yaml({"version": 1, "aliases": self.aliases})
        out["params.yaml"] = _yaml({"version": 1, "routes": self.params})
        return out

    def resolve(self, alias: str, day: date) -> str:
        for entry in self.aliases[alias]:
            start, end = entry["effective_from"], entry.get("effective_to")
            if start <= day and (end is None or day < end):
                return entry["snapshot"]
        raise KeyError(f"alias {alias!r} has no snapshot effective on {day}")


def _yaml(value: Any) -> bytes:
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True).encode()


def capture_time_stores(per_call_values: bool = True) -> Stores:
    """``per_call_values=False``: templates that print no retrieval score and no date."""
    return Stores(
        templates={
            SUPPORT_TEMPLATE: {
                "v1": _SUPPORT_V1,
                "v2": _SUPPORT_V2,
                "v3": _SUPPORT_V3 if per_call_values else _SUPPORT_V3_UNSCORED,
            },
            TRIAGE_TEMPLATE: {"v1": _TRIAGE_V1 if per_call_values else _TRIAGE_V1_UNDATED},
            AGENT_TEMPLATE: {"v1": _AGENT_V1},
            KB_TEMPLATE: {"v1": KB_V1},
        },
        template_tools={AGENT_TEMPLATE: {"v1": AGENT_TOOLS}, KB_TEMPLATE: {"v1": KB_TOOLS}},
        snapshots={KB_SNAPSHOT: {**_KB, **KB_ARTICLES}},
        current_snapshot=KB_SNAPSHOT,
        aliases={
            SUPPORT_ALIAS: [{"snapshot": SONNET, "effective_from": date(2025, 10, 1), "effective_to": None}],
            AGENT_ALIAS: [{"snapshot": SONNET, "effective_from": date(2025, 10, 1), "effective_to": None}],
            "triage-default": [{"snapshot": HAIKU, "effective_from": date(2025, 10, 20), "effective_to": None}],
        },
        params={route: dict(p) for route, p in PARAMS.items()},
    )


def aged_stores(moved_on: date, per_call_values: bool = True) -> Stores:
    """The stores after life happened (see module docstring)."""
    stores = capture_time_stores(per_call_values)
    stores.templates[SUPPORT_TEMPLATE][EDITED_VERSION] = _SUPPORT_V2_EDITED
    rebuilt = dict(stores.snapshots[KB_SNAPSHOT])
    rebuilt[CHANGED_DOC] = rebuilt[CHANGED_DOC].replace("30 days", "14 days")
    del rebuilt[DELETED_DOC]
    stores.snapshots[KB_REBUILT] = rebuilt
    stores.current_snapshot = KB_REBUILT
    first = stores.aliases[AGENT_ALIAS][0]
    stores.aliases[AGENT_ALIAS] = [
        {**first, "effective_to": moved_on},
        {"snapshot": SONNET_NEXT, "effective_from": moved_on, "effective_to": None},
    ]
    return stores
