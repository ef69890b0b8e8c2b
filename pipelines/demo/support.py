"""The demo support assistant: retrieval over a small knowledge base, prompts
rendered from versioned templates, one frozen-call JSON v1 document per call.

The documents carry what production really has: personal data in user turns,
template variables and outputs; errors, max-token truncations, negative
feedback, low eval scores, latency and cost outliers, VIP customers,
escalations and guardrail hits; and a few honest capture defects (a legacy
path that logs no template version, an app that logged different bytes than
it sent).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from pipelines.demo import stores as st
from pipelines.demo.people import Customer
from pipelines.record.canonical import request_sha256
from pipelines.rot.render import build_request, render_template

COMPANY = "Acme Outfitters"
LANGUAGE_NAMES = {"en": "English", "pt-BR": "Brazilian Portuguese"}
PRICES = {  # USD per million tokens: input, output, cache read, cache write
    st.SONNET: (3.0, 15.0, 0.30, 3.75),
    st.SONNET_NEXT: (3.0, 15.0, 0.30, 3.75),
    st.HAIKU: (1.0, 5.0, 0.10, 1.25),
}

QUESTIONS = {
    "en": {
        "billing": [
            "Hi, I'm {name}. I was charged twice on my card {card} for the same order. Can you fix it?",
            "My invoice looks wrong. Please email the corrected one to {email}.",
            "Can I get a refund? The order arrived 20 days ago. My SSN is {tax_id} if you need to verify me.",
        ],
        "shipping": [
            "Where is my package? You can reach me at {phone}.",
            "How long does express shipping take to {address}?",
            "My international order is stuck. Contact me at {email}.",
        ],
        "account": [
            "I can't log in. My email is {email} and my password is Summer2026!",
            "How do I turn on two-factor authentication? This is {name}.",
            "Please close my account and delete my data. Name: {name}, phone {phone}.",
        ],
    },
    "pt-BR": {
        "billing": [
            "Olá, sou {name}. Fui cobrado duas vezes no cartão {card}. Meu CPF é {tax_id}.",
            "Preciso da nota fiscal do meu pedido. Meu e-mail é {email}.",
            "Quero reembolso do pedido, chegou faz 20 dias. Meu telefone é {phone}.",
        ],
        "shipping": [
            "Cadê minha encomenda? Me liga no {phone}.",
            "Quanto tempo demora a entrega expressa para {address}?",
            "Minha compra internacional está parada na alfândega. E-mail: {email}.",
        ],
        "account": [
            "Não consigo entrar na conta {email}. Podem ajudar?",
            "Como ativo a verificação em duas etapas? Aqui é {name}, CPF {tax_id}.",
            "Quero encerrar minha conta. Nome {name}, telefone {phone}.",
        ],
    },
}

ANSWERS = {
    "en": "Thanks, {first}. {fact} I've noted this on your account and sent a confirmation to {email}. [{doc}]",
    "pt-BR": "Obrigado, {first}. {fact} Registrei no seu cadastro e enviei a confirmação para {email}. [{doc}]",
}


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def cost(model: str, usage: dict[str, int]) -> float:
    p_in, p_out, p_read, p_write = PRICES.get(model, PRICES[st.SONNET])
    return round(
        (
            usage["input_tokens"] * p_in
            + usage["output_tokens"] * p_out
            + usage.get("cache_read_input_tokens", 0) * p_read
            + usage.get("cache_creation_input_tokens", 0) * p_write
        )
        / 1_000_000,
        6,
    )


def _retrieve(rng: random.Random, customer: Customer, topic: str) -> list[dict[str, Any]]:
    pool = (st.TOPICS_PT if customer.language == "pt-BR" else st.TOPICS)[topic]
    chosen = rng.sample(pool, k=min(3, len(pool)))
    scores = sorted((round(rng.uniform(0.55, 0.95), 4) for _ in chosen), reverse=True)
    kb = _STORES.snapshots[st.KB_SNAPSHOT]
    return [{"doc_id": d, "text": kb[d], "score": s} for d, s in zip(chosen, scores, strict=True)]


# the stores as they were when every demo trace was captured
_STORES = st.capture_time_stores()
_STORES_WITHOUT_PER_CALL_VALUES = st.capture_time_stores(per_call_values=False)


def _version_for(when: datetime, rng: random.Random) -> str:
    # v3 rolled out gradually: the later in the month, the more traffic it gets
    share_v3 = min(0.8, max(0.1, when.day / 30))
    r = rng.random()
    return "v3" if r < share_v3 else ("v2" if r < share_v3 + (1 - share_v3) * 0.6 else "v1")


def answer_call(
    rng: random.Random, customer: Customer, when: datetime, trace_id: str, per_call_values: bool = True
) -> dict[str, Any]:
    """One support.answer call as a frozen-call v1 document."""
    topic = rng.choice(list(st.TOPICS))
    question = rng.choice(QUESTIONS[customer.language][topic]).format(**customer.__dict__)
    docs = _retrieve(rng, customer, topic)
    version = _version_for(when, rng)
    variables = {
        "company": COMPANY,
        "language_name": LANGUAGE_NAMES[customer.language],
        "customer_tier": customer.tier,
    }
    templates = (_STORES if per_call_values else _STORES_WITHOUT_PER_CALL_VALUES).templates
    system = render_template(templates[st.SUPPORT_TEMPLATE][version], variables, docs, clock=when)
    messages = [{"role": "user", "content": question}]
    model = _STORES.resolve(st.SUPPORT_ALIAS, when.date())
    params = _STORES.params["support.answer"]
    request = build_request(model=model, system=system, messages=messages, params=params)

    first = customer.name.split()[0]
    fact = docs[0]["text"]
    output = ANSWERS[customer.language].format(first=first, fact=fact, email=customer.email, doc=docs[0]["doc_id"])
    doc = frozen_document(rng, customer, when, trace_id, "support.answer", model, st.SUPPORT_ALIAS, request, output)
    doc["prompt"] = {
        "template_id": st.SUPPORT_TEMPLATE,
        "version": version,
        "label": "production",
        "variables": variables,
    }
    doc["retrieval"] = retrieval_record(question, docs)
    if rng.random() < 0.02:
        # the legacy code path logs the rendered prompt but not which template made it
        doc["prompt"] = None
    return doc


def retrieval_record(question: str, docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The frozen call's ``retrieval`` block: the query and the documents as retrieved."""
    return {
        "embedding_model": "voyage-3-lite",
        "index_snapshot": st.KB_SNAPSHOT,
        "query": question,
        "doc_ids": [d["doc_id"] for d in docs],
        "scores": [d["score"] for d in docs],
        "texts": [d["text"] for d in docs],
    }


def triage_call(
    rng: random.Random, customer: Customer, when: datetime, trace_id: str, per_call_values: bool = True
) -> dict[str, Any]:
    """One support.triage call: a short classification whose template prints today's date."""
    topic = rng.choice(list(st.TOPICS))
    question = rng.choice(QUESTIONS[customer.language][topic]).format(**customer.__dict__)
    templates = (_STORES if per_call_values else _STORES_WITHOUT_PER_CALL_VALUES).templates
    system = render_template(templates[st.TRIAGE_TEMPLATE]["v1"], {}, clock=when)
    model = _STORES.resolve("triage-default", when.date())
    request = build_request(
        model=model,
        system=system,
        messages=[{"role": "user", "content": question}],
        params=_STORES.params["support.triage"],
    )
    doc = frozen_document(rng, customer, when, trace_id, "support.triage", model, "triage-default", request, topic)
    doc["prompt"] = {"template_id": st.TRIAGE_TEMPLATE, "version": "v1", "label": "production", "variables": {}}
    return doc


def frozen_document(
    rng: random.Random,
    customer: Customer,
    when: datetime,
    trace_id: str,
    route: str,
    model: str,
    alias: str,
    request: dict[str, Any],
    output: str,
) -> dict[str, Any]:
    """The frozen-call document around a request: response, usage, timings, outcome."""
    system_tokens = _tokens(request.get("system") or "")
    user_tokens = sum(_tokens(str(m["content"])) for m in request["messages"])
    cached = system_tokens if rng.random() < 0.6 else 0
    stop_reason = "end_turn"
    if rng.random() < 0.03:
        # truncated at max_tokens: the answer stops mid-sentence
        output = output[: max(8, len(output) // 3)]
        stop_reason = "max_tokens"
    usage = {
        "input_tokens": system_tokens + user_tokens - cached,
        "output_tokens": _tokens(output),
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }
    latency = rng.lognormvariate(7.3, 0.45)  # ~1.5 s median
    if rng.random() < 0.01:
        latency = rng.uniform(10_500, 45_000)
    if rng.random() < 0.005:
        usage["output_tokens"] = rng.randint(35_000, 60_000)  # a runaway generation: a cost outlier
        latency = max(latency, 60_000.0)
    response_id = f"msg_{rng.getrandbits(96):024x}"
    doc: dict[str, Any] = {
        "format": "tracelake.frozen_call",
        "version": 1,
        "trace_id": trace_id,
        "span_id": f"{rng.getrandbits(64):016x}",
        "session_id": f"s-{customer.user_id}-{when:%Y%m%d}",
        "user_id": customer.user_id,
        "captured_at": (when + timedelta(milliseconds=latency + 5)).isoformat(),
        "occurred_at": when.isoformat(),
        "ended_at": (when + timedelta(milliseconds=latency)).isoformat(),
        "service": route,
        "environment": "prod",
        "service_sha": "9f2c1e7",
        "segment": {
            "user_tier": customer.tier,
            "language": customer.language,
            "feature_flag": "new-retriever" if rng.random() < 0.2 else "control",
        },
        "model": {
            "id": model,
            "alias": alias,
            "resolved_snapshot": model,
            "endpoint": "https://api.anthropic.com/v1/messages",
        },
        "sampling": {k: request.get(k) for k in ("temperature", "max_tokens")},
        "request": request,
        "rendered_request_sha256": request_sha256(request),
        "latency_ms": round(latency, 1),
    }
    if rng.random() < 0.003:
        # the app logged the request after mutating it: the recorded hash is of other bytes
        doc["rendered_request_sha256"] = request_sha256({**request, "max_tokens": request.get("max_tokens", 0) + 1})
    if rng.random() < 0.02:
        doc["error"] = {
            "type": rng.choice(["overloaded_error", "api_error", "rate_limit_error"]),
            "message": "upstream returned an error",
        }
        doc["latency_ms"] = round(rng.uniform(200, 30_000), 1)
        return doc
    doc["response"] = {
        "id": response_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": output}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }
    doc["cost_usd"] = cost(model, usage)
    r = rng.random()
    if r < 0.05:
        doc["feedback"] = {
            "source": "user",
            "name": "thumbs",
            "value": "down",
            "comment": f"Still wrong. Call me at {customer.phone}" if rng.random() < 0.3 else None,
            "at": (when + timedelta(minutes=3)).isoformat(),
        }
    elif r < 0.15:
        doc["feedback"] = {
            "source": "user",
            "name": "thumbs",
            "value": "up",
            "at": (when + timedelta(minutes=2)).isoformat(),
        }
    if rng.random() < 0.2:
        doc["eval_score"] = round(rng.choice([1.5, 2.5, 3.5, 4.0, 4.5, 5.0]), 1)
    doc["escalated"] = rng.random() < 0.01
    doc["guardrail_hit"] = rng.random() < 0.005
    return doc
