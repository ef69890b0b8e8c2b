"""Prompt caching as the API does it: a prefix marked with ``cache_control``
(tools, then system) is written on first use and read for five minutes after.

A prefix shorter than the model's minimum cacheable length (1,024 to 4,096
tokens by model: the price table's ``cache_min_tokens``, as published) is not
cached, and both cache counts stay 0, as on the API. ``min_tokens`` overrides
the minimum (``Simulator(cache_min_tokens=...)``).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pipelines.llm.pricing import price
from pipelines.simulator.behaviour import prefix_tokens

TTL_SECONDS = 300


def _marked(body: dict[str, Any]) -> bool:
    blocks = list(body.get("tools") or [])
    system = body.get("system")
    if isinstance(system, list):
        blocks += system
    return bool(body.get("cache_control")) or any(isinstance(b, dict) and b.get("cache_control") for b in blocks)


def minimum(model: str) -> int:
    return price(model).cache_min_tokens


@dataclass
class PromptCache:
    min_tokens: int | None = None
    _entries: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def usage(self, body: dict[str, Any]) -> tuple[int, int]:
        """(cache_read_input_tokens, cache_creation_input_tokens) for this request."""
        if not _marked(body):
            return 0, 0
        size = prefix_tokens(body)
        model = str(body.get("model") or "")
        if size < (self.min_tokens if self.min_tokens is not None else minimum(model)):
            return 0, 0
        prefix = {"model": model, "tools": body.get("tools"), "system": body.get("system")}
        key = hashlib.sha256(json.dumps(prefix, sort_keys=True).encode()).hexdigest()
        now = time.monotonic()
        with self._lock:
            hit = self._entries.get(key, 0) > now
            self._entries[key] = now + TTL_SECONDS
        return (size, 0) if hit else (0, size)
