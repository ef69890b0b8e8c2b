"""The demo orders agent: a tool-using session written as an agent event log.

A session looks up an order, thinks, maybe issues a refund (a state change),
and answers. Tool arguments and results carry the customer's personal data,
as real tool traffic does. Some tools fail; some refunds are escalated.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from typing import Any

from pipelines.demo import stores as st
from pipelines.demo.people import Customer
from pipelines.demo.support import COMPANY, LANGUAGE_NAMES, _tokens, cost
from pipelines.record.canonical import request_sha256
from pipelines.rot.render import build_request, render_template

_STORES = st.capture_time_stores()

ASKS = {
    "en": "Hi, I'm {name} ({email}). Order {order} arrived damaged, I want my money back.",
    "pt-BR": "Oi, aqui é {name} ({email}). O pedido {order} chegou quebrado, quero meu dinheiro de volta.",
}
REPLIES = {
    "en": "I've refunded {amount:.2f} USD for order {order} to your card ending {last4}, {first}.",
    "pt-BR": "Reembolsei {amount:.2f} USD do pedido {order} no cartão final {last4}, {first}.",
}
ESCALATIONS = {
    "en": "This refund needs a colleague's approval; I've escalated order {order} and we'll email {email}.",
    "pt-BR": "Esse reembolso precisa de aprovação; encaminhei o pedido {order} e vamos escrever para {email}.",
}


class _Session:
    def __init__(self, rng: random.Random, customer: Customer, start: datetime, trace_id: str):
        self.rng, self.customer, self.trace_id = rng, customer, trace_id
        self.session_id = f"as-{trace_id[:16]}"
        self.clock = start
        self.events: list[dict[str, Any]] = []
        self.parent: str | None = None

    def emit(self, event_type: str, payload: dict[str, Any], advance_ms: float = 50.0) -> str:
        event_id = f"{self.rng.getrandbits(64):016x}"
        self.events.append(
            {
                "event_id": event_id,
                "session_id": self.session_id,
                "trace_id": self.trace_id,
                "step_index": len(self.events),
                "timestamp": self.clock.isoformat(),
                "event_type": event_type,
                "payload": payload,
                "parent_event_id": self.parent,
            }
        )
        self.clock += timedelta(milliseconds=advance_ms)
        return event_id

    def llm(self, request: dict[str, Any], content: list[dict[str, Any]], stop_reason: str, model: str) -> None:
        usage = {
            "input_tokens": sum(_tokens(str(v)) for v in (request["system"], request["messages"], request["tools"])),
            "output_tokens": sum(_tokens(str(b)) for b in content),
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        }
        latency = self.rng.lognormvariate(7.6, 0.4)
        payload = {
            "model": {"id": model, "alias": st.AGENT_ALIAS, "resolved_snapshot": model},
            "prompt": {
                "template_id": st.AGENT_TEMPLATE,
                "version": "v1",
                "label": "production",
                "variables": self.variables,
            },
            "request": request,
            "rendered_request_sha256": request_sha256(request),
            "response": {
                "id": f"msg_{self.rng.getrandbits(96):024x}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop_reason,
                "usage": usage,
            },
            "latency_ms": round(latency, 1),
            "cost_usd": cost(model, usage),
        }
        self.emit("llm.call", payload, advance_ms=latency)

    @property
    def variables(self) -> dict[str, Any]:
        return {
            "company": COMPANY,
            "refund_limit": 200,
            "currency": "USD",
            "language_name": LANGUAGE_NAMES[self.customer.language],
        }


def session_events(
    rng: random.Random, customer: Customer, start: datetime, trace_id: str, late_write: bool = False
) -> list[dict[str, Any]]:
    """The events of one agent session, in order."""
    s = _Session(rng, customer, start, trace_id)
    s.parent = s.emit(
        "session.start",
        {
            "user_id": customer.user_id,
            "service": "agent.orders",
            "environment": "prod",
            "segment": {"user_tier": customer.tier, "language": customer.language, "feature_flag": "control"},
        },
    )
    order = f"A-{rng.randint(100000, 999999)}"
    amount = round(rng.choice([19.9, 49.0, 89.5, 129.0, 349.0]), 2)
    model = _STORES.resolve(st.AGENT_ALIAS, start.date())
    system = render_template(_STORES.templates[st.AGENT_TEMPLATE]["v1"], s.variables, clock=start)
    tools = _STORES.template_tools[st.AGENT_TEMPLATE]["v1"]
    params = _STORES.params["agent.orders"]
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": ASKS[customer.language].format(name=customer.name, email=customer.email, order=order),
        }
    ]

    def call(content: list[dict[str, Any]], stop_reason: str) -> None:
        request = build_request(model=model, system=system, messages=messages, params=params, tools=tools)
        s.llm(request, content, stop_reason, model)
        messages.append({"role": "assistant", "content": content})

    lookup_id = f"toolu_{rng.getrandbits(80):020x}"
    call(
        [
            {
                "type": "tool_use",
                "id": lookup_id,
                "name": "lookup_order",
                "input": {"order_id": order, "email": customer.email},
            }
        ],
        "tool_use",
    )
    failed = rng.random() < 0.05
    result: Any = (
        "lookup timed out after 5000 ms"
        if failed
        else {
            "order_id": order,
            "status": "delivered",
            "total": amount,
            "customer": {
                "name": customer.name,
                "email": customer.email,
                "phone": customer.phone,
                "address": customer.address,
                "tax_id": customer.tax_id,
            },
            "payment": {"card": customer.card},
        }
    )
    s.emit(
        "tool.invoke",
        {
            "tool_call_id": lookup_id,
            "name": "lookup_order",
            "arguments": {"order_id": order, "email": customer.email},
            "result": result,
            "is_error": failed,
            "duration_ms": round(rng.uniform(40, 900), 1),
        },
    )
    messages.append(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": lookup_id,
                    "is_error": failed,
                    "content": result if isinstance(result, str) else [{"type": "text", "text": _compact(result)}],
                }
            ],
        }
    )
    first = customer.name.split()[0]
    last4 = customer.card.replace(" ", "")[-4:]

    if failed:
        call(
            [{"type": "text", "text": "Sorry, I can't reach the order system right now. Please try again later."}],
            "end_turn",
        )
        outcome = "failure"
    elif amount > 200:
        s.emit("agent.think", {"text": f"Refund {amount} is over the 200 USD limit; escalate."})
        call(
            [{"type": "text", "text": ESCALATIONS[customer.language].format(order=order, email=customer.email)}],
            "end_turn",
        )
        outcome = "escalated"
    else:
        s.emit("agent.think", {"text": f"Order {order} delivered; refund {amount} is within the limit."})
        refund_id = f"toolu_{rng.getrandbits(80):020x}"
        call(
            [
                {
                    "type": "tool_use",
                    "id": refund_id,
                    "name": "issue_refund",
                    "input": {"order_id": order, "amount": amount},
                }
            ],
            "tool_use",
        )
        s.emit(
            "tool.invoke",
            {
                "tool_call_id": refund_id,
                "name": "issue_refund",
                "arguments": {"order_id": order, "amount": amount},
                "result": {"refund_id": f"R-{rng.randint(10000, 99999)}", "status": "approved"},
                "duration_ms": round(rng.uniform(80, 1200), 1),
            },
        )
        s.emit("state.mutate", {"key": f"orders/{order}/refund", "value": {"amount": amount, "status": "approved"}})
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": refund_id, "content": "approved"}]}
        )
        call(
            [
                {
                    "type": "text",
                    "text": REPLIES[customer.language].format(amount=amount, order=order, last4=last4, first=first),
                }
            ],
            "end_turn",
        )
        outcome = "success"
    end: dict[str, Any] = {"outcome": outcome}
    if rng.random() < (0.3 if outcome != "success" else 0.05):
        end["feedback"] = "down"
    s.emit("session.end", end)
    if outcome == "success":
        _plant(s.events, trace_id)
    if late_write or _unit(f"late|{trace_id}") < LATE_WRITE_SHARE:
        # a cache write logged after the session ended: the state validator's message_after_interrupt
        # (its id from a hash, not the random stream, so every other session stays as it was)
        late = dict(s.events[-1], event_id=request_sha256({"late": trace_id})[:16], event_type="state.mutate")
        late.update(step_index=len(s.events), timestamp=s.clock.isoformat())
        late["payload"] = {"key": f"sessions/{s.session_id}/summary", "value": {"outcome": outcome}}
        s.events.append(late)
    return s.events


# Semantic errors the judge stage should find, planted by a hash of the trace id so that the
# random stream (and so every other session and call of the demo) stays as it was.
UPSTREAM_SHARE, TOOL_ERROR_SHARE, LATE_WRITE_SHARE = 0.03, 0.02, 0.02


def _unit(text: str) -> float:
    return int(request_sha256({"plant": text})[:8], 16) / 16**8


def _plant(events: list[dict[str, Any]], trace_id: str) -> None:
    u = _unit(trace_id)
    tools = [e for e in events if e["event_type"] == "tool.invoke"]
    if u < UPSTREAM_SHARE:
        # the order lookup came back empty; the agent refunds and answers as if it had found the order
        tool, content = tools[0], "[]"
        tool["payload"]["result"] = []
    elif u < UPSTREAM_SHARE + TOOL_ERROR_SHARE:
        # the refund failed; the agent answers that it refunded
        tool, content = tools[-1], "refund service unavailable (HTTP 503)"
        tool["payload"].update(result={"error": "refund service unavailable"}, is_error=True, http_status=503)
    else:
        return
    # what the later model calls were shown changes with it; their recorded hashes follow
    for event in events:
        if event["event_type"] != "llm.call" or event["step_index"] < tool["step_index"]:
            continue
        request = event["payload"]["request"]
        for message in request["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else []:
                if block.get("type") == "tool_result" and block.get("tool_use_id") == tool["payload"]["tool_call_id"]:
                    block["content"] = content
                    block["is_error"] = bool(tool["payload"].get("is_error"))
        event["payload"]["rendered_request_sha256"] = request_sha256(request)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
