"""A local HTTP server speaking the Anthropic Messages API, for tests.

Real clients (the anthropic SDK, with or without OpenTelemetry instrumentors)
point ``base_url`` at it and get canned responses back, streamed or not. It
records every request body it received, so a test can compare what the client
sent with what a trace recorded.

    with MessagesAPI([tool_use_reply(...), text_reply(...)]) as api:
        client = anthropic.Anthropic(base_url=api.url, api_key="test", max_retries=0)
        client.messages.create(...)
        api.requests[0].body  # the JSON body as sent

Replies are consumed in order; when the queue is empty the ``default`` reply
is served. A reply may also be a callable taking the request body, or an
``ErrorReply`` for an HTTP error.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from pipelines.simulator.loopback import LoopbackServer
from pipelines.simulator.sse import encode, stream_events

SNAPSHOT = "claude-sonnet-4-5-20250929"
_ids = itertools.count(1)


def _next_id(prefix: str) -> str:
    return f"{prefix}_01Test{next(_ids):012d}"


def usage(
    input_tokens: int = 455,
    output_tokens: int = 52,
    cache_read: int = 0,
    cache_write: int = 0,
    service_tier: str = "standard",
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": cache_write,
        "cache_read_input_tokens": cache_read,
        "service_tier": service_tier,
    }


def message(
    content: list[dict[str, Any]],
    stop_reason: str = "end_turn",
    *,
    model: str = SNAPSHOT,
    id: str | None = None,
    usage_: dict[str, Any] | None = None,
    stop_sequence: str | None = None,
) -> dict[str, Any]:
    """A Messages API response body."""
    return {
        "id": id or _next_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage_ or usage(),
    }


def text_reply(text: str, stop_reason: str = "end_turn", **kwargs: Any) -> dict[str, Any]:
    return message([{"type": "text", "text": text}], stop_reason, **kwargs)


def tool_use_reply(
    name: str, arguments: dict[str, Any], *, text: str | None = None, tool_id: str | None = None, **kwargs: Any
) -> dict[str, Any]:
    content = [{"type": "text", "text": text}] if text else []
    content.append({"type": "tool_use", "id": tool_id or _next_id("toolu"), "name": name, "input": arguments})
    return message(content, "tool_use", **kwargs)


@dataclass(frozen=True)
class ErrorReply:
    status: int = 400
    type: str = "invalid_request_error"
    message: str = "bad request"


@dataclass(frozen=True)
class ReceivedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


Reply = dict[str, Any] | ErrorReply | Callable[[dict[str, Any]], Any]


@dataclass
class MessagesAPI(LoopbackServer):
    replies: list[Reply] = field(default_factory=list)
    default: Reply | None = None
    request_id_prefix: str = "req_01Test"
    requests: list[ReceivedRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._queue = list(self.replies)

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def _next_reply(self, body: dict[str, Any]) -> Any:
        with self._lock:
            reply = self._queue.pop(0) if self._queue else self.default
        if reply is None:
            reply = text_reply("ok")
        return reply(body) if callable(reply) else reply

    def handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                body = json.loads(raw or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                with api._lock:
                    api.requests.append(ReceivedRequest(self.path, headers, body))
                    request_id = f"{api.request_id_prefix}{len(api.requests):08d}"
                if not self.path.split("?")[0].endswith("/v1/messages"):
                    self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "no route"}})
                    return
                reply = api._next_reply(body)
                if isinstance(reply, ErrorReply):
                    error = {"type": "error", "error": {"type": reply.type, "message": reply.message}}
                    self._json(reply.status, error, request_id)
                elif body.get("stream"):
                    self._stream(reply, request_id)
                else:
                    self._json(200, reply, request_id)

            def _json(self, status: int, payload: dict[str, Any], request_id: str = "") -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if request_id:
                    self.send_header("request-id", request_id)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, reply: dict[str, Any], request_id: str) -> None:
                chunks = encode(stream_events(reply))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(chunks)))
                self.send_header("request-id", request_id)
                self.end_headers()
                self.wfile.write(chunks)

        return Handler
