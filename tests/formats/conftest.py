# ruff: noqa: E501  (fixture data is kept one record per line, as sources write it)
"""Producers for format fixtures: the real OpenTelemetry SDK with in-memory
exporters serialized by the OTLP exporter's own encoders (the bytes a Collector
writes), the anthropic SDK against the local Messages API, and a two-turn
tool-using exchange to record."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pipelines.formats import SourceRef, normalize_object
from tests.messages_api import MessagesAPI, text_reply, tool_use_reply, usage

SYSTEM = "You are a weather bot."
QUESTION = "Weather in Paris?"
TOOL_ID = "toolu_01A09q90qw90lq917835lq9"
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
ANSWER = "It is 15 C and sunny in Paris."
SNAPSHOT = "claude-sonnet-4-5-20250929"


def weather_replies() -> list[dict[str, Any]]:
    return [
        tool_use_reply(
            "get_weather", {"city": "Paris"}, text="Let me check.", tool_id=TOOL_ID, id="msg_turn1",
            usage_=usage(455, 52, cache_read=0, cache_write=1024),
        ),
        text_reply(ANSWER, id="msg_turn2", usage_=usage(812, 14, cache_read=1024, cache_write=0)),
    ]  # fmt: skip


def weather_exchange(client: Any, **extra: Any) -> list[Any]:
    """Two turns: a tool call, then the answer fed by the tool result. Returns the responses."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    common = dict(model="claude-sonnet-4-5", max_tokens=256, system=SYSTEM, tools=TOOLS, **extra)
    first = client.messages.create(
        messages=list(messages), stop_sequences=["\n\nHuman:"], metadata={"user_id": "u_123"},
        extra_body={"temperature": 0.2}, **common,
    )  # fmt: skip
    messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]})
    messages.append(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": TOOL_ID, "content": "15 C, sunny"}]}
    )
    second = client.messages.create(messages=messages, extra_body={"temperature": 0.2}, **common)
    return [first, second]


def _hex_ids(value: Any) -> Any:
    # protobuf's JSON mapping writes bytes as base64; OTLP/JSON (the Collector) writes ids as hex
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v).hex()
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
            else _hex_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


def otlp_json(request: Any) -> bytes:
    return json.dumps(_hex_ids(MessageToDict(request, use_integers_for_enums=True))).encode()


@dataclass
class Otel:
    tracer_provider: TracerProvider
    spans: InMemorySpanExporter
    logger_provider: LoggerProvider
    logs: InMemoryLogRecordExporter

    def span_bytes(self) -> bytes:
        return otlp_json(encode_spans(self.spans.get_finished_spans()))

    def log_bytes(self) -> bytes:
        return otlp_json(encode_logs(self.logs.get_finished_logs()))


@pytest.fixture
def otel() -> Iterator[Otel]:
    resource = Resource.create({"service.name": "weather-agent", "deployment.environment.name": "prod"})
    tp = TracerProvider(resource=resource)
    spans = InMemorySpanExporter()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    lp = LoggerProvider(resource=resource)
    logs = InMemoryLogRecordExporter()
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
    yield Otel(tp, spans, lp, logs)
    tp.shutdown()
    lp.shutdown()


@pytest.fixture
def api() -> Iterator[MessagesAPI]:
    with MessagesAPI(weather_replies()) as server:
        yield server


def client_for(api: MessagesAPI, **options: Any) -> anthropic.Anthropic:
    options.setdefault("open_telemetry", False)
    return anthropic.Anthropic(base_url=api.url, api_key="test", max_retries=0, **options)


def normalize(data: bytes, key: str = "otel/2026/11/30/traces.json"):
    fmt, out = normalize_object(data, SourceRef(uri=f"mem://{key}", key=key, etag="e1"))
    assert not out.problems, out.problems
    return fmt, out


def messages_of(call: dict[str, Any]) -> list[tuple[str, list[tuple]]]:
    """A call's messages as (role, [(part type, text or tool name, tool call id, arguments)])."""
    return [
        (
            m["role"],
            [
                (p["type"], p.get("text") or p.get("tool_name"), p.get("tool_call_id"), p.get("arguments_json"))
                for p in m["parts"]
            ],
        )
        for m in call["messages"]
    ]
