"""Ingredients -> the canonical request: the one definition of how a prompt
template, its variables, retrieved documents, a model and params become the
request body an application sends.

Applications that render with tracelake's conventions (the demo does) produce
requests this module reproduces byte for byte; the rot check re-renders with
today's stores and compares hashes.

Templates are Jinja2, rendered in a sandbox where an undefined variable is an
error. They see their variables, ``documents`` (a list of ``{doc_id, text}``)
and two functions whose use makes a rendering impure: ``now()`` (the clock)
and ``random()`` (a seeded generator). Both come from the caller, so rendering
twice under different clocks and seeds exposes a template that depends on them.
"""

from __future__ import annotations

import random as _random
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, Template
from jinja2.sandbox import ImmutableSandboxedEnvironment


@lru_cache(maxsize=1)
def environment() -> ImmutableSandboxedEnvironment:
    return ImmutableSandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=False, autoescape=False)


@lru_cache(maxsize=512)
def compile_template(source: str) -> Template:
    return environment().from_string(source)


class _SeededRandom:
    """``random()`` for a template: a generator seeded on first use (seeding costs more
    than most renderings, and most templates never call it)."""

    def __init__(self, seed: int):
        self._seed = seed
        self._rng: _random.Random | None = None

    def __call__(self) -> float:
        if self._rng is None:
            self._rng = _random.Random(self._seed)
        return self._rng.random()


def render_template(
    source: str,
    variables: Mapping[str, Any],
    documents: Sequence[Mapping[str, Any]] = (),
    *,
    clock: datetime,
    seed: int = 0,
) -> str:
    context = {**variables, "documents": list(documents), "now": lambda: clock, "random": _SeededRandom(seed)}
    return compile_template(source).render(context)


def build_request(
    *,
    model: str,
    system: str | None,
    messages: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
    tools: Sequence[Mapping[str, Any]] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Anthropic Messages request body, keys in the order an SDK sends them
    (order does not matter to the hash, which sorts keys)."""
    request: dict[str, Any] = {"model": model}
    if system is not None:
        request["system"] = system
    request["messages"] = [dict(m) for m in messages]
    if tools:
        request["tools"] = [dict(t) for t in tools]
    request.update({k: v for k, v in params.items() if v is not None})
    if metadata:
        request["metadata"] = dict(metadata)
    return request
