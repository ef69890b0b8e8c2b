"""The garbage collector paused while a batch's objects stay alive (ingest and redaction)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """No collections while a batch is built: it allocates millions of small
    objects that all stay alive, so every collection is work for nothing.
    On the way out they are moved into the oldest generation (freeze, then
    unfreeze) instead of being scanned by the young collections first
    (~4% of the core on the 40k-call day): garbage among them waits for the
    next full collection, which would have scanned them anyway.

    Collections are stopped by a zero threshold as well as by ``gc.disable()``: a
    library may call ``gc.enable()`` meanwhile, and one does: spaCy's srsly after
    reading a model's msgpack, when the redactor loads its NER model in the middle of
    ``plan_day``. With the day's rows alive, every full collection after that took
    1.2-2.0 s, 7-8 of them while the 40k-call day was redacted (README "Speed",
    seventh round). The redactor pauses it the same way for each batch it redacts."""
    enabled = gc.isenabled()
    thresholds = gc.get_threshold()
    gc.disable()
    gc.set_threshold(0)  # no automatic collection, whoever enables the collector
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()
