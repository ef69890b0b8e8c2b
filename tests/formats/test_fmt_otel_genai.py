# ruff: noqa: E501  (fixture data is kept one record per line, as sources write it)
"""OpenTelemetry GenAI from OTLP/JSON: the anthropic SDK's own spans, the official
instrumentation (span attributes and events), the 1.28-1.36 log events, the
<= 1.27 span events, aliases, execute_tool / retrieval spans and evaluation events."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan

from pipelines.ingest.objects import SourceObject, ingest_objects
from tests.formats.conftest import (
    ANSWER,
    QUESTION,
    SNAPSHOT,
    SYSTEM,
    TOOL_ID,
    client_for,
    messages_of,
    normalize,
    weather_exchange,
)


def _calls(data: bytes):
    fmt, out = normalize(data)
    assert fmt == "otlp_json"
    return sorted(out.calls, key=lambda c: c["occurred_at"]), out


def test_anthropic_sdk_spans_with_content(api, otel):
    client = client_for(
        api, open_telemetry={"tracer_provider": otel.tracer_provider, "traces": {"content_mode": "content"}}
    )
    weather_exchange(client)
    (first, second), out = _calls(otel.span_bytes())

    assert first["source_format"] == "otel_genai"
    assert first["instrumentation_scope"] == "com.anthropic.sdk.python/2.14.0"
    assert first["service"] == "weather-agent" and first["environment"] == "prod"
    assert first["system_text"] == SYSTEM
    assert messages_of(first) == [("user", [("text", QUESTION, None, None)])]
    assert first["output_text"] == "Let me check."
    out_parts = first["output_messages"][0]["parts"]
    assert [(p["type"], p.get("tool_name"), p.get("tool_call_id"), p.get("arguments_json")) for p in out_parts] == [
        ("text", None, None, None),
        ("tool_call", "get_weather", TOOL_ID, '{"city":"Paris"}'),
    ]
    assert first["params"]["max_tokens"] == 256 and first["params"]["stop_sequences"] == ["\n\nHuman:"]
    # the SDK's span does not record extra_body params: nothing is invented
    assert first["params"]["temperature"] is None
    assert first["request_model"] == "claude-sonnet-4-5" and first["response_model"] == SNAPSHOT
    # OTel input_tokens (1479) includes the cache write; the table keeps Anthropic's uncached count
    assert first["usage"] == {
        "input_tokens": 455, "output_tokens": 52, "cache_read_input_tokens": 0,
        "cache_write_input_tokens": 1024, "total_tokens": 1531, "cost_usd": None,
    }  # fmt: skip
    assert json.loads(first["extra_json"])["attributes"]["gen_ai.usage.input_tokens"] == 1479
    assert (first["finish_reason"], first["stop_reason_native"]) == ("tool_call", "tool_use")
    assert first["response_id"] == "msg_turn1" and first["provider_request_id"].startswith("req_01Test")
    assert len(first["trace_id"]) == 32 and len(first["span_id"]) == 16
    assert first["content_captured"] and first["context_complete"]

    # turn 2: history in order, with the tool call and its result
    assert messages_of(second) == [
        ("user", [("text", QUESTION, None, None)]),
        (
            "assistant",
            [("text", "Let me check.", None, None), ("tool_call", "get_weather", TOOL_ID, '{"city":"Paris"}')],
        ),
        ("user", [("tool_result", "15 C, sunny", TOOL_ID, None)]),
    ]
    assert second["output_text"] == ANSWER
    assert (second["finish_reason"], second["stop_reason_native"]) == ("stop", "end_turn")
    assert second["usage"]["input_tokens"] == 812 and second["usage"]["cache_read_input_tokens"] == 1024
    assert "tool_results" not in second["capture_missing"]
    # every span is also a spans row
    assert {s["span_id"] for s in out.spans} == {first["span_id"], second["span_id"]}
    assert {s["kind"] for s in out.spans} == {"llm_call"}


def test_anthropic_sdk_spans_without_content_are_flagged(api, otel):
    client = client_for(api, open_telemetry={"tracer_provider": otel.tracer_provider})  # metadata_only
    weather_exchange(client)
    (first, _), _ = _calls(otel.span_bytes())
    assert first["messages"] is None and first["system_text"] is None
    assert first["content_captured"] is False and first["context_complete"] is False
    assert {"input", "output_finish_reason"} <= set(first["capture_missing"])
    assert first["response_id"] == "msg_turn1" and first["usage"]["cache_write_input_tokens"] == 1024


@pytest.fixture
def genai_instrumentor(otel, monkeypatch):
    def start(mode: str):
        from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor

        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", mode)
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", "true")
        instrumentor = AnthropicInstrumentor()
        instrumentor.instrument(tracer_provider=otel.tracer_provider, logger_provider=otel.logger_provider)
        started.append(instrumentor)

    started: list = []
    yield start
    for instrumentor in started:
        instrumentor.uninstrument()


def test_official_instrumentation_span_attributes(api, otel, genai_instrumentor):
    genai_instrumentor("SPAN_ONLY")
    weather_exchange(client_for(api))
    (first, second), _ = _calls(otel.span_bytes())
    assert first["instrumentation_scope"].startswith("opentelemetry.instrumentation.genai.anthropic")
    assert first["params"]["temperature"] == 0.2  # read from extra_body by this instrumentor
    assert [
        (t["name"], t["description"], json.loads(t["schema_json"])["required"]) for t in first["tool_definitions"]
    ] == [("get_weather", "Current weather for a city", ["city"])]
    assert (first["finish_reason"], first["stop_reason_native"]) == ("tool_call", None)
    assert messages_of(second)[2] == ("user", [("tool_result", "15 C, sunny", TOOL_ID, None)])
    assert second["system_text"] == SYSTEM and second["output_text"] == ANSWER


def test_official_instrumentation_events_in_another_object_are_joined(api, otel, genai_instrumentor):
    genai_instrumentor("EVENT_ONLY")
    weather_exchange(client_for(api))
    spans, logs = otel.span_bytes(), otel.log_bytes()
    _, alone = normalize(spans)
    assert all(c["messages"] is None for c in alone.calls)

    from datetime import UTC, datetime

    objects = [
        SourceObject(key=k, uri=f"mem://{k}", etag="e", size=len(d), last_modified=datetime.now(UTC), data=d)
        for k, d in (("otel/2026/11/30/traces-1.json", spans), ("otel/2026/11/30/logs-1.json", logs))
    ]
    batch = ingest_objects(objects, datetime.now(UTC).date(), "run", datetime.now(UTC))
    first, second = sorted(batch.calls, key=lambda c: c["occurred_at"])
    assert first["system_text"] == SYSTEM and messages_of(first) == [("user", [("text", QUESTION, None, None)])]
    assert first["output_messages"][0]["parts"][1]["tool_call_id"] == TOOL_ID
    assert second["output_text"] == ANSWER and second["content_captured"] and second["context_complete"]
    assert not batch.fragments
    assert (
        sum(s["name"] == "gen_ai.client.inference.operation.details" for s in batch.spans) == 2
    )  # the log records are kept as rows too


def _emit(otel, ctx, name, body, **attrs):
    otel.logger_provider.get_logger("legacy").emit(
        event_name=name, body=body, attributes={"gen_ai.system": "anthropic", **attrs}, context=ctx
    )


def test_log_events_span_events_and_aliases(otel):
    tracer = otel.tracer_provider.get_tracer("hand.instrumented", "0.1")
    # 1.28-1.36: metadata on the span, one log record per message
    with tracer.start_as_current_span("chat claude-3-5-sonnet", kind=trace.SpanKind.CLIENT) as span:
        span.set_attributes({
            "gen_ai.operation.name": "chat", "gen_ai.system": "anthropic",
            "gen_ai.request.model": "claude-3-5-sonnet", "gen_ai.response.model": "claude-3-5-sonnet-20241022",
            "gen_ai.response.id": "msg_events", "gen_ai.usage.input_tokens": 1479, "gen_ai.usage.output_tokens": 9,
            "gen_ai.usage.cache_creation.input_tokens": 1024, "gen_ai.response.finish_reasons": ["end_turn"],
        })  # fmt: skip
        ctx = trace.set_span_in_context(span)
        _emit(otel, ctx, "gen_ai.system.message", {"content": SYSTEM})
        _emit(otel, ctx, "gen_ai.user.message", {"content": QUESTION})
        call = {"id": TOOL_ID, "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
        _emit(otel, ctx, "gen_ai.assistant.message", {"tool_calls": [call]})
        _emit(otel, ctx, "gen_ai.tool.message", {"content": "15 C, sunny", "id": TOOL_ID})
        _emit(otel, ctx, "gen_ai.choice", {"index": 0, "finish_reason": "end_turn", "message": {"content": ANSWER}})
    # <= 1.27: content in span events
    with tracer.start_as_current_span("chat old") as old:
        old.set_attributes(
            {"gen_ai.system": "anthropic", "gen_ai.operation.name": "chat", "gen_ai.request.model": "claude-2"}
        )
        old.add_event("gen_ai.content.prompt", {"gen_ai.prompt": json.dumps([{"role": "user", "content": QUESTION}])})
        old.add_event(
            "gen_ai.content.completion", {"gen_ai.completion": json.dumps([{"role": "assistant", "content": ANSWER}])}
        )
    # >= 1.37 attributes with the spec examples' "result" alias for a tool response
    with tracer.start_as_current_span("chat alias") as alias:
        alias.set_attributes({
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
            "gen_ai.input.messages": json.dumps([{"role": "tool", "parts": [{"type": "tool_call_response", "id": TOOL_ID, "result": "15 C"}]}]),
        })  # fmt: skip

    from datetime import UTC, datetime

    objects = [
        SourceObject(key=k, uri=k, etag="e", size=len(d), last_modified=datetime.now(UTC), data=d)
        for k, d in (("a/traces.json", otel.span_bytes()), ("a/logs.json", otel.log_bytes()))
    ]
    batch = ingest_objects(objects, datetime.now(UTC).date(), "run", datetime.now(UTC))
    by_span = {c["span_id"]: c for c in batch.calls}
    events = by_span[format(span.get_span_context().span_id, "016x")]
    assert events["provider"] == "anthropic" and events["system_text"] == SYSTEM
    assert messages_of(events) == [
        ("user", [("text", QUESTION, None, None)]),
        ("assistant", [("tool_call", "get_weather", TOOL_ID, '{"city":"Paris"}')]),
        ("tool", [("tool_result", "15 C, sunny", TOOL_ID, None)]),
    ]
    assert events["output_text"] == ANSWER and events["finish_reason"] == "stop"
    assert events["usage"]["cache_write_input_tokens"] == 1024 and events["usage"]["input_tokens"] == 455
    legacy = by_span[format(old.get_span_context().span_id, "016x")]
    assert messages_of(legacy) == [("user", [("text", QUESTION, None, None)])] and legacy["output_text"] == ANSWER
    aliased = by_span[format(alias.get_span_context().span_id, "016x")]
    assert aliased["messages"][0]["parts"][0]["content_json"] == '"15 C"'


def test_tools_retrievals_and_evaluations_join_their_call(api, otel):
    tracer = otel.tracer_provider.get_tracer("weather.app")
    client = client_for(
        api, open_telemetry={"tracer_provider": otel.tracer_provider, "traces": {"content_mode": "content"}}
    )
    messages = [{"role": "user", "content": QUESTION}]
    with tracer.start_as_current_span("invoke_agent weather") as agent:
        agent.set_attributes({"gen_ai.operation.name": "invoke_agent", "session.id": "sess-42"})
        with tracer.start_as_current_span("retrieval kb") as r:
            r.set_attributes({
                "gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": "kb-v2026-11-29",
                "gen_ai.retrieval.query.text": "weather policy Paris",
                "gen_ai.retrieval.documents": json.dumps([{"id": "kb-17#3", "score": 0.83}, {"id": "kb-04#1", "score": 0.71}]),
            })  # fmt: skip
        first = client.messages.create(model="claude-sonnet-4-5", max_tokens=256, system=SYSTEM, messages=messages)
        with tracer.start_as_current_span("execute_tool get_weather") as t:
            t.set_attributes({
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.id": TOOL_ID, "gen_ai.tool.call.arguments": '{"city":"Paris"}',
                "gen_ai.tool.call.result": '"15 C, sunny"',
            })  # fmt: skip
        messages += [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": TOOL_ID, "content": "15 C, sunny"}]},
        ]
        client.messages.create(model="claude-sonnet-4-5", max_tokens=256, system=SYSTEM, messages=messages)
    chat_spans = sorted(
        (s for s in otel.spans.get_finished_spans() if s.name == "anthropic.messages.create"),
        key=lambda s: s.start_time,
    )
    evaluated = trace.set_span_in_context(NonRecordingSpan(chat_spans[1].get_span_context()))
    otel.logger_provider.get_logger("judge").emit(
        event_name="gen_ai.evaluation.result", context=evaluated,
        attributes={"gen_ai.evaluation.name": "faithfulness", "gen_ai.evaluation.score.value": 0.92,
                    "gen_ai.evaluation.score.label": "faithful", "gen_ai.evaluation.explanation": "Grounded."},
    )  # fmt: skip

    from datetime import UTC, datetime

    objects = [
        SourceObject(key=k, uri=k, etag="e", size=len(d), last_modified=datetime.now(UTC), data=d)
        for k, d in (("b/traces.json", otel.span_bytes()), ("b/logs.json", otel.log_bytes()))
    ]
    batch = ingest_objects(objects, datetime.now(UTC).date(), "run", datetime.now(UTC))
    first_call, second_call = sorted(batch.calls, key=lambda c: c["occurred_at"])
    assert first_call["parent_span_id"] == format(agent.get_span_context().span_id, "016x")
    docs = first_call["retrieval"]["documents"]
    assert [(d["doc_id"], d["rank"], d["score"], d["text"]) for d in docs] == [
        ("kb-17#3", 1, 0.83, None), ("kb-04#1", 2, 0.71, None),
    ]  # fmt: skip
    assert first_call["retrieval"]["query_text"] == "weather policy Paris"
    assert first_call["retrieval"]["index_snapshot"] == "kb-v2026-11-29"
    # semconv documents carry no text: honest about it
    assert "intermediate_observations" in first_call["capture_missing"]
    (tool,) = second_call["tool_executions"]
    assert (tool["tool_call_id"], tool["name"], tool["arguments_json"], tool["result_json"]) == (
        TOOL_ID, "get_weather", '{"city":"Paris"}', '"15 C, sunny"',
    )  # fmt: skip
    (feedback,) = second_call["feedback"]
    assert (feedback["name"], feedback["value_number"], feedback["value_string"], feedback["comment"]) == (
        "faithfulness", 0.92, "faithful", "Grounded.",
    )  # fmt: skip
    kinds = sorted(s["kind"] for s in batch.spans)
    assert kinds == ["agent", "llm_call", "llm_call", "other", "retrieval", "tool"]


def test_same_export_twice_through_the_ingest_job_is_one_call_each(api, otel, tmp_path, instance):
    import gzip

    from tests.environments import local_settings, run_stage

    client = client_for(
        api, open_telemetry={"tracer_provider": otel.tracer_provider, "traces": {"content_mode": "content"}}
    )
    weather_exchange(client)
    data = gzip.compress(otel.span_bytes())
    day = otel.spans.get_finished_spans()[0].start_time // 10**9
    stamp = datetime_from(day)
    settings = local_settings(tmp_path)
    for minute, name in (("16", "tracesk8XzQ2pLm"), ("17", "tracesQ9aB3cD4e")):  # the Collector re-sent the batch
        folder = tmp_path / "source" / f"year={stamp:%Y}/month={stamp:%m}/day={stamp:%d}/hour=09/minute={minute}"
        folder.mkdir(parents=True)
        (folder / f"{name}.json.gz").write_bytes(data)
    assert run_stage(settings, "ingest", f"{stamp:%Y-%m-%d}", instance).success
    warehouse = settings.warehouse()
    calls = warehouse.read("calls")
    assert calls.height == 2 and calls["call_id"].n_unique() == 2
    assert warehouse.read("traces").height == 2
    versions = {t: warehouse.version(t) for t in ("calls", "spans", "traces")}
    assert run_stage(settings, "ingest", f"{stamp:%Y-%m-%d}", instance).success
    assert {t: warehouse.version(t) for t in versions} == versions


def datetime_from(seconds: int):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC)
