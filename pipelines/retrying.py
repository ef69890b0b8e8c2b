"""Reading again what a store failed to give whole: the one retry rule for reads of the
source and of the tables (writes retry on commit conflicts, in the warehouse)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class SourceUnavailable(Exception):
    """An object or table that could not be read whole after every retry; nothing of it was used."""


def read_again(read: Callable[[], T], attempts: int, retryable: tuple[type[BaseException], ...], failed: str) -> T:
    """``read()``, again with backoff while it raises ``retryable``; then
    ``gave_up`` (SourceUnavailable) saying ``failed``: what could not be read."""
    for attempt in range(1, attempts + 1):
        try:
            return read()
        except retryable as e:
            if attempt == attempts:
                raise gave_up(failed, attempts, e) from e
            time.sleep(min(2.0, 0.1 * 2**attempt))
    raise AssertionError("unreachable")


def gave_up(failed: str, attempts: int, error: BaseException) -> SourceUnavailable:
    """What a read says when its ``attempts`` ran out: ``failed`` (what), the count and the error type."""
    return SourceUnavailable(
        f"{failed} {attempts} times ({type(error).__name__}); check the endpoint and re-run the partition"
    )
