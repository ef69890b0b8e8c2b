"""From what the SDK returned to an ``LLMResult``."""

from __future__ import annotations

from typing import Any

from pipelines.llm.pricing import cost_usd
from pipelines.llm.request import LLMRequest, LLMResult


def succeeded(
    request: LLMRequest,
    message: dict[str, Any],
    *,
    attempts: int,
    simulated: bool,
    batch_id: str | None = None,
) -> LLMResult:
    usage = message.get("usage") or {}
    model = message.get("model") or request.model
    return LLMResult(
        key=request.key,
        request_sha256=request.request_sha256,
        status="succeeded",
        response=message,
        error=None,
        model=model,
        input_tokens=usage.get("input_tokens") or 0,
        output_tokens=usage.get("output_tokens") or 0,
        cache_read_input_tokens=usage.get("cache_read_input_tokens") or 0,
        cache_write_input_tokens=usage.get("cache_creation_input_tokens") or 0,
        cost_usd=cost_usd(model, usage, batch=batch_id is not None),
        batch_id=batch_id,
        attempts=attempts,
        simulated=simulated,
    )


def failed(
    request: LLMRequest,
    status: str,
    error: str,
    *,
    attempts: int,
    simulated: bool,
    batch_id: str | None = None,
) -> LLMResult:
    return LLMResult(
        key=request.key,
        request_sha256=request.request_sha256,
        status=status,
        response=None,
        error=error,
        model=request.model,
        batch_id=batch_id,
        attempts=attempts,
        simulated=simulated,
    )
