"""No automatic garbage collection while a day's objects are built (ingest and redaction)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """No automatic collection inside: a batch allocates millions of objects that all stay
    alive, and each full collection over them is work for nothing (README "Speed": the
    ingest stage with and without). A zero threshold stops collections whoever calls
    ``gc.enable()`` meanwhile (spaCy does, loading a model). On the way out what was made
    moves to the oldest generation, not through the young collections first."""
    thresholds = gc.get_threshold()
    gc.set_threshold(0)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.freeze()
        gc.unfreeze()
