"""One ``messages.create`` per request, with the SDK's retries.

The SDK retries 408, 409, 429, every 5xx (529 overloaded included),
connection errors and timeouts, with exponential backoff that waits what
``retry-after-ms`` / ``retry-after`` say when the server sends them; the
client is built with ``max_retries`` for that. What still fails afterwards is
a terminal ``errored`` result naming the error, so nothing is lost, and
``attempts`` records every HTTP attempt (a retried timeout may have been
billed by the provider: the ledger shows it, it is not silent).

The body goes out as the run's ``Translator`` makes it; a 400 that refuses a
parameter the rules did not know teaches the translator (for the rest of the
run) and the request goes out once more without it.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import anthropic

from pipelines.llm.ledger import Sending, now
from pipelines.llm.params import Translator, sampling_record, split_for_sdk
from pipelines.llm.request import LLMRequest, LLMResult
from pipelines.llm.response import failed, succeeded
from pipelines.record.canonical import request_sha256

SIMULATED_HEADER = "x-tracelake-simulated"


@dataclass(frozen=True)
class Sent:
    """A result with what the ledger row needs besides it."""

    request: LLMRequest
    result: LLMResult
    sampling: dict[str, Any]
    sent_at: datetime
    latency_ms: float | None
    sending: Sending = Sending()
    attempts: tuple[dict[str, Any], ...] = field(default=())


def create_kwargs(client: anthropic.Anthropic) -> frozenset[str]:
    """The keyword arguments this SDK's ``messages.create`` takes (the rest goes in extra_body)."""
    names = inspect.signature(client.messages.create).parameters
    return frozenset(n for n in names if n not in ("extra_headers", "extra_query", "extra_body", "timeout"))


def _retryable(error: anthropic.APIError) -> bool:
    if isinstance(error, anthropic.APIConnectionError):  # includes APITimeoutError
        return True
    status = getattr(error, "status_code", 0)
    return status in (408, 409, 429) or status >= 500


def describe(error: anthropic.APIError) -> str:
    """Error type, HTTP status and the provider's message; never the request."""
    status = getattr(error, "status_code", None)
    body = getattr(error, "body", None)
    kind = body.get("error", {}).get("type") if isinstance(body, dict) else None
    head = type(error).__name__ + (f" {status}" if status else "") + (f" {kind}" if kind else "")
    return f"{head}: {error.message}"


def error_message(error: anthropic.APIError) -> str:
    """The provider's own message of an error (``error.message`` of the JSON body)."""
    body = getattr(error, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message") or "")
    return str(error.message)


def send(
    client: anthropic.Anthropic,
    request: LLMRequest,
    kwargs_names: frozenset[str],
    max_retries: int,
    translator: Translator,
    run_id: str,
) -> Sent:
    """Send one request as translated; a refusal the rules did not know is learned and the request resent."""
    attempts = 0
    sent_at = now()
    started = time.monotonic()
    learned = 0
    while True:
        wire, dropped = translator.wire(request.body, cache_prefix=request.cache_prefix)
        kwargs, extra = split_for_sdk(wire, kwargs_names)
        try:
            raw = client.messages.with_raw_response.create(**kwargs, extra_body=extra or None)
        except anthropic.APIError as error:
            retried = _retryable(error)
            attempts += max_retries + 1 if retried else 1
            if isinstance(error, anthropic.BadRequestError) and learned < 3:
                if translator.learn(wire, error_message(error)) is not None:
                    learned += 1
                    continue
            simulated = simulated_response(getattr(error, "response", None))
            result = failed(request, "errored", describe(error), attempts=attempts, simulated=simulated)
            break
        attempts += raw.retries_taken + 1
        message = raw.parse().model_dump(mode="json", exclude_none=False)
        result = succeeded(request, message, attempts=attempts, simulated=simulated_response(raw))
        break
    latency = (time.monotonic() - started) * 1000
    result = replace(result, dropped=tuple(sorted(dropped)))
    sending = Sending(translator.api_version, request_sha256(wire), dict(dropped))
    attempt = {
        "run_id": run_id,
        "at": sent_at.isoformat(),
        "via": "direct",
        "status": result.status,
        "error": result.error,
        "http_attempts": attempts,
    }
    return Sent(
        request, result, sampling_record(request.body, dropped), sent_at, round(latency, 1), sending, (attempt,)
    )


def simulated_response(response: Any) -> bool:
    """Whether a response came from tracelake's simulator (its header says so)."""
    headers = getattr(response, "headers", None)
    return bool(headers is not None and headers.get(SIMULATED_HEADER) == "true")
