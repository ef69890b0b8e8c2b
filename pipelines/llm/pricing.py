"""USD prices per million tokens (``prices.yaml``, as published), and the cost of
one response as the API bills it.

A model id is priced by its family: the id without a Bedrock or Vertex decoration
and without its snapshot date (``claude-sonnet-4-6-20261015`` -> ``claude-sonnet-4-6``).
A model whose family is not in the table is priced at the table's most expensive
row, never at a guess: estimates and budget caps stay upper bounds, and
``is_priced`` says the price is that fallback. Message Batches bill every token
at half price.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

BATCH_DISCOUNT = 0.5
TABLE = Path(__file__).with_name("prices.yaml")
# decorations around a family name: Bedrock's (us.)anthropic. prefix and -v1:0 suffix,
# Vertex's @date, a snapshot date, the -0 / -latest aliases of a line
_PLATFORM_PREFIX = re.compile(r"^(?:[a-z]{2,4}\.)?anthropic\.")
_SUFFIXES = re.compile(r"(?:-v\d+(?::\d+)?|@\d{8}|-\d{8}|-latest|-0)$")


class _Rates(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float = Field(ge=0)
    cache_write: float = Field(ge=0)


class _LongPrompt(_Rates):
    above_tokens: int = Field(gt=0)


class _Row(_Rates):
    cache_min_tokens: int = Field(ge=0)
    long_prompt: _LongPrompt | None = None


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    as_of: date
    models: dict[str, _Row]


@dataclass(frozen=True)
class Price:
    """USD per million tokens of one model family."""

    family: str
    input: float
    output: float
    cache_read: float
    cache_write: float
    cache_min_tokens: int
    long_prompt: _LongPrompt | None = None
    known: bool = True  # False: the family is not in the table and this is the most expensive row


def family(model: str | None) -> str:
    """The price-table family of a model id, dated snapshot, alias or platform id."""
    name = _PLATFORM_PREFIX.sub("", (model or "").strip())
    while True:
        shorter = _SUFFIXES.sub("", name)
        if shorter == name:
            return name
        name = shorter


@cache
def table() -> tuple[date, dict[str, Price]]:
    """(the date the table was read from the pricing page, family -> Price)."""
    raw = _Table.model_validate(yaml.safe_load(TABLE.read_text()))
    rows = {
        name: Price(name, **row.model_dump(exclude={"long_prompt"}), long_prompt=row.long_prompt)
        for name, row in raw.models.items()
    }
    return raw.as_of, rows


def most_expensive() -> Price:
    rows = table()[1].values()
    return max(rows, key=lambda p: (p.output, p.input))


def price(model: str | None) -> Price:
    """The price of a model id; the most expensive row (``known=False``) for a family not in the table."""
    found = table()[1].get(family(model))
    if found is not None:
        return found
    top = most_expensive()
    return Price(
        family(model),
        top.input,
        top.output,
        top.cache_read,
        top.cache_write,
        top.cache_min_tokens,
        top.long_prompt,
        known=False,
    )


def is_priced(model: str | None) -> bool:
    return family(model) in table()[1]


def cost_usd(model: str | None, usage: Mapping[str, Any], *, batch: bool = False) -> float:
    """What the API bills for one response's ``usage``."""
    p = price(model)
    fresh = usage.get("input_tokens") or 0
    read = usage.get("cache_read_input_tokens") or 0
    written = usage.get("cache_creation_input_tokens") or 0
    rates: _Rates | Price = p
    if p.long_prompt is not None and fresh + read + written > p.long_prompt.above_tokens:
        rates = p.long_prompt
    total = (
        fresh * rates.input
        + (usage.get("output_tokens") or 0) * rates.output
        + read * rates.cache_read
        + written * rates.cache_write
    ) / 1_000_000
    if batch or usage.get("service_tier") == "batch":
        total *= BATCH_DISCOUNT
    return round(total, 8)


def estimate_usd(
    model: str | None,
    input_tokens: int,
    output_tokens: int,
    *,
    batch: bool = False,
    cache_read: int = 0,
    cache_write: int = 0,
) -> float:
    """The cost of the given token counts (input here excludes the cached ones)."""
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_write,
    }
    return cost_usd(model, usage, batch=batch)
