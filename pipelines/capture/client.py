"""Wrapping an anthropic client so every ``messages.create`` is captured.

``capture(client, sink)`` returns a stand-in for the client (sync or async)
whose ``messages.create`` makes the same call through
``messages.with_raw_response`` (to see the exact request bytes and the
request id), returns what ``create`` would have returned, and hands a
frozen-call record to a background writer. Streams are passed through event
by event and recorded when they finish. Capture code never raises into the
application: its failures are logged by type only.

Pass ingredients per call with the ``tracelake=`` keyword (a dict or
``Ingredients``), which is removed before the SDK sees the call.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

from pipelines.capture.record import Ingredients, dumps, frozen_call
from pipelines.capture.sinks import Sink, object_key
from pipelines.capture.stream import MessageAccumulator
from pipelines.capture.writer import BackgroundWriter

log = logging.getLogger("tracelake.capture")
KEYWORD = "tracelake"


def _now() -> datetime:
    return datetime.now(UTC)


class _Recorder:
    def __init__(self, writer: BackgroundWriter, defaults: Ingredients, prefix: str):
        self.writer = writer
        self.defaults = defaults
        self.prefix = prefix

    def record(self, raw: Any, response: dict | None, started: datetime, first: datetime | None, ing, error=None):
        try:
            request = raw_request(raw)
            if request is None:
                return
            request_id = None if raw is None or isinstance(raw, dict) else raw.headers.get("request-id")
            doc = frozen_call(
                request,
                response,
                started_at=started,
                ended_at=_now(),
                first_token_at=first,
                ingredients=ing,
                request_id=request_id,
                error=error,
                defaults=self.defaults,
            )
            self.writer.submit(object_key(started, doc["span_id"], self.prefix), dumps(doc))
        except Exception as e:  # never break the application call
            log.warning("tracelake capture: could not build the record (%s)", type(e).__name__)


def raw_request(raw: Any) -> dict | None:
    import json

    if isinstance(raw, dict):  # the kwargs, when the call failed before a response existed
        return raw
    content = raw.http_request.content
    return json.loads(content) if content else None


def _kwargs_body(kwargs: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in kwargs.items() if k not in ("extra_headers", "extra_query", "extra_body", "timeout")}
    body.update(kwargs.get("extra_body") or {})
    return body


class _Messages:
    def __init__(self, messages: Any, recorder: _Recorder):
        self._messages = messages
        self._recorder = recorder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._messages, name)

    def create(self, **kwargs: Any) -> Any:
        ing = Ingredients.of(kwargs.pop(KEYWORD, None))
        started = _now()
        try:
            raw = self._messages.with_raw_response.create(**kwargs)
        except Exception as e:
            self._recorder.record(_kwargs_body(kwargs), None, started, None, ing, e)
            raise
        result = raw.parse()
        if kwargs.get("stream"):
            return _SyncStream(result, raw, self._recorder, started, ing)
        self._recorder.record(raw, _as_dict(result), started, None, ing)
        return result


class _AsyncMessages(_Messages):
    async def create(self, **kwargs: Any) -> Any:  # type: ignore[override]
        ing = Ingredients.of(kwargs.pop(KEYWORD, None))
        started = _now()
        try:
            raw = await self._messages.with_raw_response.create(**kwargs)
        except Exception as e:
            self._recorder.record(_kwargs_body(kwargs), None, started, None, ing, e)
            raise
        result = await raw.parse()
        if kwargs.get("stream"):
            return _AsyncStream(result, raw, self._recorder, started, ing)
        self._recorder.record(raw, _as_dict(result), started, None, ing)
        return result


def _as_dict(message: Any) -> dict | None:
    try:
        return message.model_dump(mode="json", exclude_none=True) if hasattr(message, "model_dump") else dict(message)
    except Exception as e:
        log.warning("tracelake capture: could not read the response (%s)", type(e).__name__)
        return None


class _StreamBase:
    def __init__(self, stream: Any, raw: Any, recorder: _Recorder, started: datetime, ing: Ingredients):
        self._stream = stream
        self._raw = raw
        self._recorder = recorder
        self._started = started
        self._ing = ing
        self._first: datetime | None = None
        self._acc = MessageAccumulator()
        self._done = False

    def _see(self, event: Any) -> None:
        try:
            if self._first is None and getattr(event, "type", None) == "content_block_delta":
                self._first = _now()
            self._acc.add(event)
        except Exception as e:
            log.warning("tracelake capture: could not read a stream event (%s)", type(e).__name__)

    def _finish(self, error: BaseException | None = None) -> None:
        if not self._done:
            self._done = True
            self._recorder.record(self._raw, self._acc.message, self._started, self._first, self._ing, error)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _SyncStream(_StreamBase):
    def __iter__(self) -> Iterator[Any]:
        try:
            for event in self._stream:
                self._see(event)
                yield event
        except Exception as e:
            self._finish(e)
            raise
        self._finish()

    def __enter__(self) -> _SyncStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._finish()
        self._stream.close()

    def close(self) -> None:
        self._finish()
        self._stream.close()


class _AsyncStream(_StreamBase):
    async def __aiter__(self) -> AsyncIterator[Any]:
        try:
            async for event in self._stream:
                self._see(event)
                yield event
        except Exception as e:
            self._finish(e)
            raise
        self._finish()

    async def __aenter__(self) -> _AsyncStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._finish()
        await self._stream.close()

    async def close(self) -> None:
        self._finish()
        await self._stream.close()


class CapturedClient:
    """The wrapped client: ``messages`` is captured, everything else is the client's own."""

    def __init__(self, client: Any, writer: BackgroundWriter, defaults: Ingredients, prefix: str):
        self._client = client
        self.writer = writer
        recorder = _Recorder(writer, defaults, prefix)
        is_async = type(client).__name__.startswith("Async")
        self.messages = (_AsyncMessages if is_async else _Messages)(client.messages, recorder)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def flush(self, timeout: float = 10.0) -> bool:
        return self.writer.flush(timeout)

    def close(self) -> None:
        self.writer.close()


def capture(
    client: Any,
    sink: Sink,
    *,
    prefix: str = "",
    max_queue: int = 1000,
    **defaults: Any,
) -> CapturedClient:
    """Wrap an ``anthropic.Anthropic`` or ``AsyncAnthropic`` client. ``defaults`` are
    ingredients for every call (service, environment, ...)."""
    return CapturedClient(client, BackgroundWriter(sink, max_queue), Ingredients.of(defaults), prefix)
