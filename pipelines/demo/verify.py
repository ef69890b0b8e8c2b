"""The demo's identity-check route, ``account.verify``: the call an exact replay is for.

A customer gives their tax id (CPF, CNPJ or SSN) and their email, and the model
says whether the id is well formed. Its bugs depend on the value's format (a
validator that accepts any 11 digits), which a ``<BR_CPF_1>`` placeholder hides:
in ``encrypt`` mode with the replay key the request goes out with the real id,
byte for byte, and the replay is ``exact``. Recorded on a model the API still
serves (``claude-haiku-4-5-20251001``), with no sampling parameters and a fixed
system prompt (no template to rot), so nothing but redaction stands between it
and an exact replay.

``generate(..., verify_calls=N)`` adds N such calls a day (under
``YYYY/MM/DD/verify/``), drawn from their own random stream so the other
routes' objects are byte-for-byte the same with or without them.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

from pipelines.demo import stores as st
from pipelines.demo.people import Customer
from pipelines.demo.support import COMPANY, frozen_document
from pipelines.rot.render import build_request

ROUTE = "account.verify"
SYSTEM = (
    f"You check identity documents for {COMPANY}. Say whether the tax id the customer gives is well formed "
    "for its country (check digits included) and repeat it in its canonical format. Answer in one sentence."
)
PARAMS = {"max_tokens": 64}
QUESTION = {
    "en": "Please verify my account. My SSN is {tax_id} and my email is {email}.",
    "pt-BR": "Quero verificar minha conta. Meu CPF é {tax_id} e meu e-mail é {email}.",
}
ANSWER = {
    "en": "The id {tax_id} is well formed.",
    "pt-BR": "O documento {tax_id} é válido.",
}


def verify_call(rng: random.Random, customer: Customer, when: datetime, trace_id: str) -> dict[str, Any]:
    """One account.verify call as a frozen-call v1 document."""
    request = build_request(
        model=st.HAIKU,
        system=SYSTEM,
        messages=[{"role": "user", "content": QUESTION[customer.language].format(**customer.__dict__)}],
        params=PARAMS,
    )
    output = ANSWER[customer.language].format(tax_id=customer.tax_id)
    return frozen_document(rng, customer, when, trace_id, ROUTE, st.HAIKU, st.HAIKU, request, output)
