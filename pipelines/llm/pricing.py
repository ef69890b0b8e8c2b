"""USD prices per million tokens, and the cost of one response as the API bills it.

Cache writes (5-minute TTL) cost 1.25x the input price, cache reads 0.1x;
Message Batches bill every token at half price. A model not listed is priced
as Sonnet, and says so through ``is_priced``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BATCH_DISCOUNT = 0.5


@dataclass(frozen=True)
class Price:
    input: float
    output: float

    @property
    def cache_read(self) -> float:
        return self.input * 0.1

    @property
    def cache_write(self) -> float:
        return self.input * 1.25


SONNET = Price(3.0, 15.0)
PRICES: dict[str, Price] = {
    "claude-sonnet-4-5": SONNET,
    "claude-sonnet-4-6": SONNET,
    "claude-sonnet-5": SONNET,
    "claude-haiku-4-5": Price(1.0, 5.0),
    "claude-haiku-5-5": Price(1.0, 5.0),
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-5": Price(5.0, 25.0),
}


def price(model: str | None) -> Price:
    """The price of a model id, dated snapshot or alias (longest listed prefix wins)."""
    name = (model or "").removeprefix("anthropic.")  # Bedrock ids: anthropic.claude-...
    for prefix in sorted(PRICES, key=len, reverse=True):
        if name.startswith(prefix):
            return PRICES[prefix]
    return SONNET


def is_priced(model: str | None) -> bool:
    name = (model or "").removeprefix("anthropic.")
    return any(name.startswith(prefix) for prefix in PRICES)


def cost_usd(model: str | None, usage: Mapping[str, Any], *, batch: bool = False) -> float:
    """What the API bills for one response's ``usage``."""
    p = price(model)
    total = (
        (usage.get("input_tokens") or 0) * p.input
        + (usage.get("output_tokens") or 0) * p.output
        + (usage.get("cache_read_input_tokens") or 0) * p.cache_read
        + (usage.get("cache_creation_input_tokens") or 0) * p.cache_write
    ) / 1_000_000
    if batch or usage.get("service_tier") == "batch":
        total *= BATCH_DISCOUNT
    return round(total, 8)


def estimate_usd(model: str | None, input_tokens: int, output_tokens: int, *, batch: bool = False) -> float:
    """An upper-bound cost: no cache reads assumed, every output token up to max_tokens."""
    return cost_usd(model, {"input_tokens": input_tokens, "output_tokens": output_tokens}, batch=batch)
