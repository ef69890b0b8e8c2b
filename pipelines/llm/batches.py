"""Message Batches: submit, persist the batch id, poll, stream the results.

A batch's row goes into ``llm_batches`` right after ``batches.create``
returns and before the first poll, so a run killed while polling finds the
batch on re-run (``open_batches``) and resumes it instead of paying for the
same requests twice. Results are streamed from ``batches.results`` (JSONL)
entry by entry; each is written to ``llm_requests`` before the batch is
marked ended. Errored entries (overloaded, api errors) and expired ones go
into a new batch, up to ``rounds`` submissions per request; invalid requests
are terminal at once, except a refused sampling parameter, which is dropped
and the request resubmitted.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anthropic

from pipelines.llm.direct import Sent, simulated_response
from pipelines.llm.ledger import BATCHES, Ledger, batch_row, now, open_batches, with_state
from pipelines.llm.params import refused_sampling, sampling_record, wire_body
from pipelines.llm.request import PERMANENT_ERROR_TYPES, LLMRequest
from pipelines.llm.response import failed, succeeded

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    request: LLMRequest
    submissions: int = 0
    dropped: frozenset[str] = frozenset()
    sent_at: datetime | None = None
    last_error: tuple[str, str] | None = None  # (status, message) of the last retryable failure
    simulated: bool = False
    batch_id: str | None = None  # the last batch it was in


@dataclass
class BatchSender:
    client: anthropic.Anthropic
    ledger: Ledger
    backend: str
    run_id: str
    flush: Callable[[], None]
    poll_interval: float = 30.0
    rounds: int = 3
    max_batch_requests: int = 10_000
    created: list[str] = field(default_factory=list)

    def run(self, requests: Sequence[LLMRequest]) -> Iterator[Sent]:
        pending = {r.key: _Pending(r) for r in requests}
        retry: dict[str, _Pending] = {}
        # a batch an earlier run submitted and never saw end: resume it
        for row in open_batches(self.ledger, self.backend):
            keys = [k for k in json.loads(row["request_keys_json"]) if k in pending]
            if not keys:
                continue
            log.info("resuming batch %s (%d requests) submitted by run %s", row["batch_id"], len(keys), row["run_id"])
            try:
                self.client.messages.batches.retrieve(row["batch_id"])
            except anthropic.NotFoundError:
                # e.g. a simulator that has restarted since: the batch is gone, its requests are not answered
                log.warning("batch %s is unknown to the provider; its requests are sent again", row["batch_id"])
                self.ledger.merge(BATCHES, [with_state(row, "not_found")])
                continue
            entries = {k: pending.pop(k) for k in keys}
            for entry in entries.values():
                entry.submissions += 1
                entry.sent_at = row["created_at"]
            yield from self._collect(row["batch_id"], entries, retry, row["created_at"], row["run_id"])
        pending.update(retry)
        for _round in range(self.rounds):
            if not pending:
                return
            retry = {}
            todo = [p for p in pending.values() if p.submissions < self.rounds]
            for entry in pending.values():
                if entry.submissions >= self.rounds:
                    yield self._give_up(entry)
            for start in range(0, len(todo), self.max_batch_requests):
                chunk = {p.request.key: p for p in todo[start : start + self.max_batch_requests]}
                batch_id, created_at = self._submit(chunk)
                yield from self._collect(batch_id, chunk, retry, created_at, self.run_id)
            pending = retry
        for entry in pending.values():
            yield self._give_up(entry)

    def _submit(self, chunk: dict[str, _Pending]) -> tuple[str, datetime]:
        items = []
        for key, entry in chunk.items():
            params = wire_body(entry.request.body, cache_prefix=entry.request.cache_prefix, dropped=entry.dropped)
            items.append({"custom_id": key, "params": params})
        raw = self.client.messages.batches.with_raw_response.create(requests=items)
        batch = raw.parse().model_dump(mode="json")
        created_at = now()
        for entry in chunk.values():
            entry.submissions += 1
            entry.sent_at = created_at
        self.created.append(batch["id"])
        # persisted before the first poll: a run killed from here on resumes this batch id
        self.ledger.merge(
            BATCHES,
            [
                batch_row(
                    batch,
                    list(chunk),
                    backend=self.backend,
                    simulated=simulated_response(raw),
                    run_id=self.run_id,
                    created_at=created_at,
                )
            ],
        )
        log.info("submitted batch %s with %d requests", batch["id"], len(chunk))
        return batch["id"], created_at

    def _poll(self, batch_id: str) -> tuple[dict[str, Any], bool]:
        while True:
            raw = self.client.messages.batches.with_raw_response.retrieve(batch_id)
            batch = raw.parse().model_dump(mode="json")
            if batch["processing_status"] == "ended":
                return batch, simulated_response(raw)
            time.sleep(self.poll_interval)

    def _collect(
        self,
        batch_id: str,
        entries: dict[str, _Pending],
        retry: dict[str, _Pending],
        created_at: datetime,
        run_id: str,
    ) -> Iterator[Sent]:
        batch, simulated = self._poll(batch_id)
        seen: set[str] = set()
        for item in self.client.messages.batches.results(batch_id):
            entry = entries.get(item.custom_id)
            if entry is None or item.custom_id in seen:
                continue
            seen.add(item.custom_id)
            outcome = self._outcome(batch_id, entry, item.result.model_dump(mode="json"), simulated)
            if outcome is None:
                retry[item.custom_id] = entry
            else:
                yield outcome
        for key, entry in entries.items():
            if key not in seen:  # a result the batch never listed: submit it again
                entry.batch_id = batch_id
                entry.last_error = ("errored", f"batch {batch_id} returned no result for this request")
                retry[key] = entry
        # every result is in the ledger before the batch is marked ended
        self.flush()
        row = batch_row(
            batch, list(entries), backend=self.backend, simulated=simulated, run_id=run_id, created_at=created_at
        )
        self.ledger.merge(BATCHES, [row])

    def _outcome(self, batch_id: str, entry: _Pending, result: dict[str, Any], simulated: bool) -> Sent | None:
        """The entry's terminal result, or None when it should go into the next batch."""
        kind = result.get("type")
        request = entry.request
        entry.simulated = simulated
        entry.batch_id = batch_id
        if kind == "succeeded":
            done = succeeded(
                request, result["message"], attempts=entry.submissions, simulated=simulated, batch_id=batch_id
            )
            return self._sent(entry, done)
        if kind == "errored":
            error = (result.get("error") or {}).get("error") or {}
            error_type, message = error.get("type", "api_error"), error.get("message", "")
            text = f"batch {error_type}: {message}"
            if error_type in PERMANENT_ERROR_TYPES:
                wire = wire_body(request.body, cache_prefix=False, dropped=entry.dropped)
                refused = refused_sampling(message, wire)
                if refused:
                    entry.dropped |= {refused}
                    entry.submissions -= 1  # a refused parameter does not count against the retry rounds
                    return None
                result = failed(
                    request, "errored", text, attempts=entry.submissions, simulated=simulated, batch_id=batch_id
                )
                return self._sent(entry, result)
            entry.last_error = ("errored", text)
            return None
        if kind == "expired":
            entry.last_error = ("expired", f"batch {batch_id}: the request expired before it was processed")
            return None
        if kind == "canceled":
            done = failed(
                request,
                "canceled",
                f"batch {batch_id} was canceled",
                attempts=entry.submissions,
                simulated=simulated,
                batch_id=batch_id,
            )
            return self._sent(entry, done)
        entry.last_error = ("errored", f"batch {batch_id}: unknown result type {kind!r}")
        return None

    def _give_up(self, entry: _Pending) -> Sent:
        status, message = entry.last_error or ("errored", "no result")
        text = f"{message} (after {entry.submissions} batch submissions)"
        result = failed(
            entry.request, status, text, attempts=entry.submissions, simulated=entry.simulated, batch_id=entry.batch_id
        )
        return self._sent(entry, result)

    def _sent(self, entry: _Pending, result: Any) -> Sent:
        return Sent(entry.request, result, sampling_record(entry.request.body, entry.dropped), entry.sent_at, None)
