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
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import yaml

SUPPORT_TEMPLATE = "support-answer"
TRIAGE_TEMPLATE = "support-triage"
AGENT_TEMPLATE = "agent-orders"

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
        },
        template_tools={AGENT_TEMPLATE: {"v1": AGENT_TOOLS}},
        snapshots={KB_SNAPSHOT: dict(_KB)},
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
