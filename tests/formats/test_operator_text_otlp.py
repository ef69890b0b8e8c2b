"""Operator text by evidence on the OpenTelemetry paths (issue 33): the real producer packages
record a support assistant whose system prompt names its brand ("Loja Aurora"), with no
template store, for three users' calls; the system prompt line their calls all carry is
operator text, so person-name NER leaves the brand alone in every column and span, while
the name each customer types in their own user turn is redacted.

Paths: the official OpenTelemetry GenAI instrumentation, OpenInference, OpenLLMetry, and
the anthropic SDK's own spans with and without content capture. The user id reaches the
spans the way applications put it there: a span processor copying the current user onto
every span (``user.id``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import SpanProcessor

from pipelines.redact.policy import load_policy
from pipelines.redact.redactor import Redactor
from tests.formats.conftest import client_for, normalize
from tests.formats.test_fmt_openinference import openinference, openllmetry  # noqa: F401 (fixtures)
from tests.formats.test_fmt_otel_genai import genai_instrumentor  # noqa: F401 (fixture)
from tests.messages_api import MessagesAPI, text_reply
from tests.redact.conftest import KEYS

BRAND = "Loja Aurora"
SYSTEM = f"Você é o assistente {BRAND}.\nResponda sempre em português, com cordialidade."
# user id -> the customer's name, typed in their own user turn
CUSTOMERS = {"u-ana": "Maria Eduarda Carvalho", "u-bruno": "Carlos Alberto Pereira", "u-carla": "Mariana Costa"}


class CurrentUser(SpanProcessor):
    """Copies the current user onto every span as it starts (what an application's baggage processor does)."""

    user: str | None = None

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if self.user:
            span.set_attribute("user.id", self.user)


@pytest.fixture
def users(otel) -> CurrentUser:
    processor = CurrentUser()
    otel.tracer_provider.add_span_processor(processor)
    return processor


@pytest.fixture
def api() -> Iterator[MessagesAPI]:
    with MessagesAPI(default=text_reply("Vou verificar o seu pedido agora.")) as server:
        yield server


def conversations(client: Any, users: CurrentUser, customers: dict[str, str]) -> None:
    for user, name in customers.items():
        users.user = user
        client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=128,
            system=SYSTEM,
            messages=[{"role": "user", "content": f"Oi, aqui é a {name}, meu pedido não chegou."}],
        )
    users.user = None


def redacted(otel) -> tuple[list[dict], list[dict], str, str]:
    """(calls, spans) as ingest parses the export, redacted with NER and no template store;
    and the raw and redacted rows as text."""
    _, out = normalize(otel.span_bytes())
    with Redactor(load_policy(), "placeholder", KEYS, ner=True) as redactor:
        result = redactor.redact_rows(out.calls, out.spans)
    raw = json.dumps([out.calls, out.spans], ensure_ascii=False, default=str)
    done = json.dumps([result.calls, result.spans], ensure_ascii=False, default=str)
    return result.calls, result.spans, raw, done


def _official(otel, genai_instrumentor, api):  # noqa: F811
    genai_instrumentor("SPAN_ONLY")
    return client_for(api)


def _sdk(content: bool) -> Callable:
    def client(otel, genai_instrumentor, api):  # noqa: F811
        traces = {"content_mode": "content"} if content else {}
        return client_for(api, open_telemetry={"tracer_provider": otel.tracer_provider, "traces": traces})

    return client


PATHS = {
    "otel genai instrumentation": ("genai_instrumentor", _official),
    "openinference": ("openinference", lambda otel, _, api: client_for(api)),
    "openllmetry": ("openllmetry", lambda otel, _, api: client_for(api)),
    "sdk spans with content": (None, _sdk(content=True)),
    "sdk spans without content": (None, _sdk(content=False)),
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_the_brand_survives_and_the_customers_do_not(path, request, otel, users, api):
    fixture, make_client = PATHS[path]
    instrumentation = request.getfixturevalue(fixture) if fixture else None
    conversations(make_client(otel, instrumentation, api), users, CUSTOMERS)
    calls, spans, raw, done = redacted(otel)
    assert sorted(c["user_id"] for c in calls) == sorted(CUSTOMERS)
    captured = path != "sdk spans without content"
    assert (BRAND in raw) is captured  # without content capture the prompt is not recorded at all
    # the brand survives wherever the export recorded it, and nothing in it became a placeholder
    assert done.count(BRAND) == raw.count(BRAND)
    assert "<PERSON_" not in json.dumps([c.get("system_text") for c in calls])
    for call in calls:
        if call["system_text"] is not None:
            assert call["system_text"] == SYSTEM
    # every customer's name is gone, from their turn and from every span that recorded it
    for name in CUSTOMERS.values():
        assert (name in raw) is captured
        assert name not in done
    if captured:
        assert "<PERSON_1>" in done


def test_one_users_line_is_no_operator_text(otel, users, api, openinference):  # noqa: F811
    """The control: the same prompt in one user's calls only (that user repeating it) is no
    evidence, and NER reads it as it reads any text: the brand is taken for a name."""
    customers = {"u-ana": CUSTOMERS["u-ana"]}
    client = client_for(api)
    for _ in range(3):
        conversations(client, users, customers)
    calls, _, raw, done = redacted(otel)
    assert len(calls) == 3 and BRAND in raw
    assert BRAND not in done
    assert all(BRAND not in c["system_text"] for c in calls)
