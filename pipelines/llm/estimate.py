"""Token and cost estimates before anything is sent.

Without a call to ``count_tokens`` the input estimate is the request's text
length divided by 3.5 characters per token, rounded up, plus 8 tokens per
message: Claude's tokenizer averages about 4 characters per token on English
prose, so this errs on the high side, which is the side a budget cap wants.
Output is bounded by each request's ``max_tokens``. A model missing from the
price table is priced at its most expensive row (``pricing.py``).

``with_cache`` is what the same requests are expected to cost when the prefix
they share (tools and system prompt, marked for caching) is written once per
model and read by the rest: an expectation, not a bound (a prefix under the
model's minimum is never cached, and the provider's batch caching is best-effort).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipelines.llm.pricing import estimate_usd, price
from pipelines.llm.request import Estimate, LLMRequest
from pipelines.record.canonical import canonical_json

CHARS_PER_TOKEN = 3.5
PER_MESSAGE_TOKENS = 8


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(_text(v) for v in value)
    if isinstance(value, dict):
        if value.get("type") == "text":
            return value.get("text") or ""
        if "content" in value:
            return _text(value["content"])
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else str(value)


def _tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


def prefix_tokens(body: Mapping[str, Any]) -> int:
    """Estimated tokens of the cacheable prefix: the tool definitions and the system prompt."""
    chars = len(_text(body.get("system")))
    if body.get("tools"):
        chars += len(json.dumps(body["tools"], ensure_ascii=False))
    return _tokens(chars)


def estimated_input_tokens(body: Mapping[str, Any]) -> int:
    """A documented, slightly pessimistic count of a request's input tokens."""
    messages = body.get("messages") or []
    chars = sum(len(_text(m.get("content"))) for m in messages)
    return prefix_tokens(body) + _tokens(chars) + PER_MESSAGE_TOKENS * len(messages)


def request_usd(request: LLMRequest, *, batch: bool) -> float:
    """The most one request can cost (no cache reads, every output token up to max_tokens)."""
    tokens = estimated_input_tokens(request.body)
    return estimate_usd(request.model, tokens, int(request.body.get("max_tokens") or 0), batch=batch)


def estimate(
    requests: Iterable[LLMRequest],
    *,
    batch: bool,
    count_tokens: Callable[[LLMRequest], int] | None = None,
) -> Estimate:
    """The most ``requests`` can cost: every output up to max_tokens, no cache reads."""
    n = input_tokens = output_tokens = 0
    usd = 0.0
    for request in requests:
        tokens = count_tokens(request) if count_tokens else estimated_input_tokens(request.body)
        max_out = int(request.body.get("max_tokens") or 0)
        n += 1
        input_tokens += tokens
        output_tokens += max_out
        usd += estimate_usd(request.model, tokens, max_out, batch=batch)
    return Estimate(requests=n, input_tokens=input_tokens, max_output_tokens=output_tokens, usd=round(usd, 6))


@dataclass(frozen=True)
class CacheEstimate:
    usd: float
    cache_read_tokens: int
    cache_write_tokens: int
    cached_requests: int  # requests expected to read a prefix another request wrote


def with_cache(requests: Iterable[LLMRequest], *, batch: bool) -> CacheEstimate:
    """The expected cost when requests sharing a cacheable prefix (same model, tools and
    system prompt, at least the model's minimum) write it once and read it after."""
    usd = 0.0
    read = written = cached = 0
    seen: set[str] = set()
    for request in requests:
        body = request.body
        total = estimated_input_tokens(body)
        prefix = prefix_tokens(body)
        max_out = int(body.get("max_tokens") or 0)
        if not request.cache_prefix or prefix < price(request.model).cache_min_tokens:
            usd += estimate_usd(request.model, total, max_out, batch=batch)
            continue
        key = canonical_json([request.model, body.get("tools"), body.get("system")])
        if key in seen:
            usd += estimate_usd(request.model, total - prefix, max_out, batch=batch, cache_read=prefix)
            read += prefix
            cached += 1
        else:
            seen.add(key)
            usd += estimate_usd(request.model, total - prefix, max_out, batch=batch, cache_write=prefix)
            written += prefix
    return CacheEstimate(round(usd, 6), read, written, cached)
