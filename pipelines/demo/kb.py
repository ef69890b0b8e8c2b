"""The demo's long-prompt route, ``support.kb``: the knowledge-base assistant.

Its prompts have the sizes production RAG prompts have: a system prompt of about
900 tokens of instructions (template ``kb-answer`` v1), six retrieved articles of
about 600 tokens each rendered into it in rank order, and three tool
definitions: about 5,000 tokens of prefix in front of a short customer turn.
Every question on a topic retrieves the same six articles, so the calls of a
topic share that whole prefix, which is what prompt caching pays for (above
every model's cacheable minimum, 1,024 to 4,096 tokens). Recorded, like the
support route, on ``claude-sonnet-4-5-20250929`` with a temperature.

``generate(..., long_prompt_calls=N)`` adds N such calls a day (under
``YYYY/MM/DD/kb/``), drawn from their own random stream so the other routes'
objects are byte-for-byte the same with or without them.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

from pipelines.demo import stores as st
from pipelines.demo.people import Customer
from pipelines.demo.support import COMPANY, QUESTIONS, frozen_document, retrieval_record
from pipelines.rot.render import build_request, render_template

ANSWER = {
    "en": "Thanks for writing. {fact} I have noted this on your account. [{doc}]",
    "pt-BR": "Obrigado por escrever. Conforme a nossa política, posso ajudar com isso. [{doc}]",
}


# the stores as they were when every demo trace was captured
_STORES = st.capture_time_stores()


def kb_call(rng: random.Random, customer: Customer, when: datetime, trace_id: str) -> dict[str, Any]:
    """One support.kb call as a frozen-call v1 document."""
    topic = rng.choice(list(st.KB_TOPICS))
    question = rng.choice(QUESTIONS[customer.language][topic]).format(**customer.__dict__)
    stores = _STORES
    articles = stores.snapshots[st.KB_SNAPSHOT]
    docs = [
        {"doc_id": doc_id, "text": articles[doc_id], "score": round(0.92 - 0.04 * rank, 4)}
        for rank, doc_id in enumerate(st.KB_TOPICS[topic])
    ]
    variables = {"company": COMPANY}
    system = render_template(stores.templates[st.KB_TEMPLATE]["v1"], variables, docs, clock=when)
    model = stores.resolve(st.SUPPORT_ALIAS, when.date())
    request = build_request(
        model=model,
        system=system,
        messages=[{"role": "user", "content": question}],
        params=stores.params["support.kb"],
        tools=stores.template_tools[st.KB_TEMPLATE]["v1"],
    )
    output = ANSWER[customer.language].format(fact=docs[0]["text"].split(". ")[0] + ".", doc=docs[0]["doc_id"])
    doc = frozen_document(rng, customer, when, trace_id, "support.kb", model, st.SUPPORT_ALIAS, request, output)
    doc["prompt"] = {"template_id": st.KB_TEMPLATE, "version": "v1", "label": "production", "variables": variables}
    doc["retrieval"] = retrieval_record(question, docs)
    return doc
