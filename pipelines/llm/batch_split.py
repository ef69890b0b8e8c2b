"""The API's limits on one Message Batch, and the split of requests under both of them.

Planning a replay counts its batches from these before anything is sent
(``pipelines/replay/plan.py``), and the sender splits by the same rule
(``pipelines/llm/batches.py``). Kept apart from the sender so that loading the code
location (every run worker and code server) does not import the anthropic SDK.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

MAX_BATCH_REQUESTS = 100_000
MAX_BATCH_BYTES = 256 * 1024 * 1024
ENVELOPE_BYTES = len('{"requests":[]}')


def item_bytes(custom_id: str, params: dict[str, Any]) -> int:
    """Bytes one entry adds to a batch's create request (its JSON and a comma)."""
    return len(json.dumps({"custom_id": custom_id, "params": params}, ensure_ascii=False).encode()) + 1


def split(sizes: Sequence[int], *, max_requests: int, max_bytes: int) -> Iterator[range]:
    """Consecutive index ranges of entries of the given sizes, each one batch under both limits."""
    start, total = 0, ENVELOPE_BYTES
    for i, size in enumerate(sizes):
        if i > start and (i - start >= max_requests or total + size > max_bytes):
            yield range(start, i)
            start, total = i, ENVELOPE_BYTES
        total += size
    if start < len(sizes):
        yield range(start, len(sizes))
