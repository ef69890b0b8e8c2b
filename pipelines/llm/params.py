"""Turn a stored request body into what the SDK sends.

anthropic 2.14's ``messages.create`` no longer takes ``temperature``,
``top_p`` or ``top_k``: they travel in ``extra_body``, and a model that refuses
one answers 400 naming it, after which the request is sent once more without
it and the ledger says which were accepted. Prompt caching marks the prefix the
calls of one candidate share (the tools and the system prompt) with
``cache_control``; that changes the bytes sent, not the request's key.
"""

from __future__ import annotations

import copy
import re
from typing import Any

SAMPLING = ("temperature", "top_p", "top_k")
EPHEMERAL = {"type": "ephemeral"}


def with_cache_control(body: dict[str, Any]) -> dict[str, Any]:
    """The body with a cache breakpoint after the tools and after the system prompt."""
    out = copy.deepcopy(body)
    if out.get("tools"):
        out["tools"][-1] = {**out["tools"][-1], "cache_control": EPHEMERAL}
    system = out.get("system")
    if isinstance(system, str) and system:
        out["system"] = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
    elif isinstance(system, list) and system:
        out["system"][-1] = {**out["system"][-1], "cache_control": EPHEMERAL}
    return out


def wire_body(body: dict[str, Any], *, cache_prefix: bool, dropped: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The JSON body as it goes on the wire (sampling parameters the model refused removed)."""
    out = with_cache_control(body) if cache_prefix else copy.deepcopy(body)
    for name in dropped:
        out.pop(name, None)
    out.pop("stream", None)
    return out


def split_for_sdk(wire: dict[str, Any], accepted_kwargs: frozenset[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(keyword arguments ``messages.create`` takes, the rest as ``extra_body``)."""
    kwargs = {k: v for k, v in wire.items() if k in accepted_kwargs and k not in SAMPLING}
    extra = {k: v for k, v in wire.items() if k not in kwargs}
    return kwargs, extra


def refused_sampling(message: str, sent: dict[str, Any]) -> str | None:
    """The sampling parameter a 400 says the model does not support, if that is what it says."""
    for name in SAMPLING:
        if name in sent and re.search(rf"\b{name}\b", message) and re.search(r"not supported|unsupported", message):
            return name
    return None


def sampling_record(body: dict[str, Any], dropped: frozenset[str]) -> dict[str, dict[str, Any]]:
    """{param: {"value", "accepted"}} for the sampling parameters the request asked for."""
    return {name: {"value": body[name], "accepted": name not in dropped} for name in SAMPLING if name in body}
