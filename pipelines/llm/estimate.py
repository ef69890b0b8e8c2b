"""Token and cost estimates before anything is sent.

Without a call to ``count_tokens`` the input estimate is the request's text
length divided by 3.5 characters per token, rounded up, plus 8 tokens per
message: Claude's tokenizer averages about 4 characters per token on English
prose, so this errs on the high side, which is the side a budget cap wants.
Output is bounded by each request's ``max_tokens``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import Any

from pipelines.llm.pricing import estimate_usd
from pipelines.llm.request import Estimate, LLMRequest

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


def estimated_input_tokens(body: dict[str, Any]) -> int:
    """A documented, slightly pessimistic count of a request's input tokens."""
    chars = len(_text(body.get("system")))
    messages = body.get("messages") or []
    chars += sum(len(_text(m.get("content"))) for m in messages)
    if body.get("tools"):
        chars += len(json.dumps(body["tools"], ensure_ascii=False))
    return math.ceil(chars / CHARS_PER_TOKEN) + PER_MESSAGE_TOKENS * len(messages)


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
