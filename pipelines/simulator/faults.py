"""Faults the simulator injects on demand, drawn from a seeded generator.

``rate`` of the API requests (Messages, batch create/retrieve/results,
count_tokens) fail before any work is done, spread over ``statuses``
(429 rate_limit_error, 529 overloaded_error, 500 api_error), each with a
``retry-after-ms`` header of ``retry_after_ms`` (and ``retry-after`` in whole
seconds, rounded up). ``timeout_rate`` of Messages requests hang for
``timeout_seconds`` and are then dropped unanswered (never processed, never
billed), so a client with a shorter timeout sees a timeout.
``expire_batches`` is how many of the next batches expire: half of their
requests (every other one) come back ``expired`` instead of processed.
``batch_error_rate`` of the entries of every batch come back ``errored``
(overloaded_error or api_error). ``failing`` names batch entries by custom_id
that come back ``errored`` (overloaded_error) the given number of times
(-1: every time), whatever the draws say.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

ERRORS = {
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit (simulated)"),
    529: ("overloaded_error", "Overloaded (simulated)"),
    500: ("api_error", "Internal server error (simulated)"),
}


@dataclass
class Faults:
    rate: float = 0.0
    statuses: tuple[int, ...] = (429, 529, 500)
    retry_after_ms: int = 20
    timeout_rate: float = 0.0
    timeout_seconds: float = 2.0
    expire_batches: int = 0
    batch_error_rate: float = 0.0
    seed: int = 0
    failing: dict[str, int] = field(default_factory=dict)
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._rng = random.Random(f"faults:{self.seed}")

    def decide(self, route: str) -> str | None:
        """This request's fault: "429", "529", "500", "timeout" (Messages only) or None.

        One draw sequence under one lock, so a seed gives the same faults to the
        n-th request whatever order concurrent requests arrive in.
        """
        with self._lock:
            error = self._rng.random() < self.rate
            status = self._rng.choice(self.statuses)
            hang = route == "messages" and self._rng.random() < self.timeout_rate
        if error and self.rate:
            return str(status)
        return "timeout" if hang else None

    def expire_next_batch(self) -> bool:
        with self._lock:
            if self.expire_batches > 0:
                self.expire_batches -= 1
                return True
        return False

    def batch_entry_error(self, custom_id: str | None = None) -> str | None:
        with self._lock:
            left = self.failing.get(custom_id or "", 0)
            if left:
                self.failing[custom_id] = left - 1 if left > 0 else left
                return "overloaded_error"
            if self.batch_error_rate and self._rng.random() < self.batch_error_rate:
                return self._rng.choice(["overloaded_error", "api_error"])
        return None
