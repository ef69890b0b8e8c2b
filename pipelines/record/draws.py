"""Stable draws from text: the same value in every process, machine and release (unlike
Python's ``hash`` or polars' ``Expr.hash``). Sampling (retention, the judge) and sharding
all draw here, so a trace is sampled the same way wherever it is decided."""

from __future__ import annotations

import hashlib


def stable_int(text: str) -> int:
    """The first 8 bytes of ``sha256(text)`` as a big-endian integer: 64 stable bits."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def uniform(text: str) -> float:
    """A number in [0, 1) fixed by ``text``: ``stable_int(text) / 2**64``."""
    return stable_int(text) / 2.0**64
