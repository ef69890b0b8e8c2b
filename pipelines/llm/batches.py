"""Message Batches: write ahead, submit, persist the batch id, poll, stream the results.

Every point of the path leaves the ledger able to finish the work without
paying twice:

- before ``batches.create``: a write-ahead ``llm_batches`` row (state
  ``creating``) holds the keys about to be submitted;
- after it returns: the batch's own row (``in_progress``) and the write-ahead
  row marked ``created`` land in one commit. A run killed in between leaves only
  the write-ahead row: the next run lists the provider's batches created since,
  waits for the ones of the same size to end, and adopts the one whose
  ``custom_id``s are exactly those keys (``adopted``); none: the write-ahead row
  becomes ``not_created`` and the keys are sent;
- while polling: the next run finds the batch ``in_progress`` and resumes it;
- results: every entry is written to ``llm_requests`` before the batch is
  marked ``ended``; entries of a resumed batch that no request of the run asks
  for are written too (``purpose`` ``unclaimed``): they were billed.

Requests are split into batches under both of the API's limits (100,000
requests, 256 MB of request body), translated by the run's ``Translator`` at
submission. A refused parameter in an errored entry teaches the translator and
the entry goes into the next batch without it; other errored and expired
entries go into the next batch too, up to ``rounds`` submissions; a batch whose
results are past the 29-day download window is marked ``results_expired`` and
its unanswered requests are sent again, not lost.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import anthropic

from pipelines.llm.batch_split import ENVELOPE_BYTES, MAX_BATCH_BYTES, MAX_BATCH_REQUESTS, item_bytes, split
from pipelines.llm.direct import Sent, simulated_response
from pipelines.llm.ledger import (
    BATCHES,
    CREATED,
    CREATING,
    NOT_CREATED,
    NOT_FOUND,
    RESULTS_EXPIRED,
    Ledger,
    Sending,
    Unclaimed,
    batch_row,
    known_batch_ids,
    now,
    open_batches,
    with_state,
    write_ahead,
)
from pipelines.llm.params import Translator, sampling_record
from pipelines.llm.request import PERMANENT_ERROR_TYPES, LLMRequest, LLMResult
from pipelines.llm.response import failed, succeeded
from pipelines.record.canonical import request_sha256

log = logging.getLogger(__name__)

RESULTS_DAYS = 29


@dataclass
class _Pending:
    request: LLMRequest
    submissions: int = 0
    sent_at: datetime | None = None
    last_error: tuple[str, str] | None = None  # (status, message) of the last retryable failure
    simulated: bool = False
    batch_id: str | None = None  # the last batch it was in
    sending: Sending = Sending()
    attempts: list[dict[str, Any]] = field(default_factory=list)
    wire: dict[str, Any] | None = None  # as submitted last


@dataclass
class BatchSender:
    client: anthropic.Anthropic
    ledger: Ledger
    backend: str
    run_id: str
    flush: Callable[[], None]
    translator: Translator
    estimate_usd: Callable[[LLMRequest], float] = lambda r: 0.0
    poll_interval: float = 30.0
    rounds: int = 3
    max_batch_requests: int = MAX_BATCH_REQUESTS
    max_batch_bytes: int = MAX_BATCH_BYTES
    created: list[str] = field(default_factory=list)
    unclaimed: list[Unclaimed] = field(default_factory=list)

    def run(self, requests: Sequence[LLMRequest]) -> Iterator[Sent]:
        pending = {r.key: _Pending(r) for r in requests}
        retry: dict[str, _Pending] = {}
        # batches an earlier run submitted (or was submitting) and never saw end: finish them
        for row in open_batches(self.ledger, self.backend):
            keys = json.loads(row["request_keys_json"])
            if not any(k in pending for k in keys):
                continue
            if row["state"] == CREATING:
                yield from self._adopt(row, keys, pending, retry)
            else:
                yield from self._resume(row, keys, pending, retry)
        pending.update(retry)
        for _round in range(self.rounds):
            if not pending:
                return
            retry = {}
            todo = [p for p in pending.values() if p.submissions < self.rounds]
            for entry in pending.values():
                if entry.submissions >= self.rounds:
                    yield self._give_up(entry)
            submitted = [self._submit(chunk) for chunk in self._chunks(todo, retry)]
            for chunk, row in submitted:
                yield from self._collect(row["batch_id"], chunk, retry, row["created_at"], self.run_id, row)
            yield from (self._give_up(e) for e in retry.values() if e.last_error and e.last_error[0] == "too_large")
            pending = {k: e for k, e in retry.items() if not (e.last_error and e.last_error[0] == "too_large")}
        for entry in pending.values():
            yield self._give_up(entry)

    # -- submitting --------------------------------------------------------------------------------

    def _chunks(self, todo: list[_Pending], retry: dict[str, _Pending]) -> Iterator[dict[str, _Pending]]:
        """The entries in batches under both limits, each entry translated as of now."""
        fitting, sizes = [], []
        for entry in todo:
            wire, dropped = self.translator.wire(entry.request.body, cache_prefix=entry.request.cache_prefix)
            entry.wire = wire
            entry.sending = Sending(self.translator.api_version, request_sha256(wire), dict(dropped))
            size = item_bytes(entry.request.key, wire)
            if size + ENVELOPE_BYTES > self.max_batch_bytes:
                entry.last_error = ("too_large", f"the request alone is {size:,} bytes, over a batch's limit")
                retry[entry.request.key] = entry
                continue
            fitting.append(entry)
            sizes.append(size)
        for part in split(sizes, max_requests=self.max_batch_requests, max_bytes=self.max_batch_bytes):
            yield {fitting[i].request.key: fitting[i] for i in part}

    def _submit(self, chunk: dict[str, _Pending]) -> tuple[dict[str, _Pending], dict[str, Any]]:
        items = [{"custom_id": key, "params": entry.wire} for key, entry in chunk.items()]
        size = len(json.dumps({"requests": items}, ensure_ascii=False).encode())
        estimated = round(sum(self.estimate_usd(e.request) for e in chunk.values()), 6)
        ahead = write_ahead(
            list(chunk), backend=self.backend, run_id=self.run_id, request_bytes=size, estimated_usd=estimated
        )
        # written before the provider hears of the batch: a run killed from here on is finished by the next
        self.ledger.merge(BATCHES, [ahead])
        raw = self.client.messages.batches.with_raw_response.create(requests=items)
        batch = raw.parse().model_dump(mode="json")
        created_at = now()
        for entry in chunk.values():
            entry.submissions += 1
            entry.sent_at = created_at
            entry.batch_id = batch["id"]
        self.created.append(batch["id"])
        real = batch_row(
            batch,
            list(chunk),
            backend=self.backend,
            simulated=simulated_response(raw),
            run_id=self.run_id,
            created_at=created_at,
            linked=ahead["batch_id"],
            request_bytes=size,
            estimated_usd=estimated,
            # open until its results are in llm_requests, whatever the create response says (a batch
            # can end before its id is recorded): a run killed before then resumes it
            state="in_progress",
        )
        # one commit: the batch's row, and the write-ahead row pointing at it
        self.ledger.merge(BATCHES, [real, with_state(ahead, CREATED, linked_batch_id=batch["id"])])
        log.info("submitted batch %s with %d requests (%.1f MB)", batch["id"], len(chunk), size / 1e6)
        return chunk, real

    # -- finishing what an earlier run left ---------------------------------------------------------

    def _resume(self, row, keys, pending, retry) -> Iterator[Sent | Unclaimed]:
        log.info("resuming batch %s (%d requests) submitted by run %s", row["batch_id"], len(keys), row["run_id"])
        try:
            self.client.messages.batches.retrieve(row["batch_id"])
        except anthropic.NotFoundError:
            # e.g. a simulator that has restarted since: the batch is gone, its requests are not answered
            log.warning("batch %s is unknown to the provider; its requests are sent again", row["batch_id"])
            self.ledger.merge(BATCHES, [with_state(row, NOT_FOUND)])
            return
        entries = self._take(keys, pending, row["batch_id"], row["created_at"])
        yield from self._collect(row["batch_id"], entries, retry, row["created_at"], row["run_id"], row, keys)

    def _adopt(self, ahead, keys, pending, retry) -> Iterator[Sent]:
        """A run died between creating a batch and recording it: find the batch by its custom_ids."""
        wanted = set(keys)
        since = ahead["created_at"] - timedelta(minutes=5)
        known = known_batch_ids(self.ledger)
        same_size = []
        for batch in self.client.messages.batches.list(limit=100):
            created = _ts(batch.created_at)
            if created < since:
                break  # newest first: the rest are older than the write-ahead row
            counts = batch.request_counts
            total = counts.processing + counts.succeeded + counts.errored + counts.canceled + counts.expired
            if batch.id not in known and total == len(wanted):
                same_size.append((created, batch.id))
        for created, batch_id in sorted(same_size):
            batch, simulated = self._poll(batch_id)
            if batch.get("archived_at"):
                continue  # its results are gone: it cannot be told apart, nor read
            results = list(self.client.messages.batches.results(batch_id))
            if {item.custom_id for item in results} != wanted:
                continue
            log.warning(
                "adopted batch %s (%d requests): run %s created it and died before recording it",
                batch_id,
                len(wanted),
                ahead["run_id"],
            )
            real = batch_row(
                {**batch, "processing_status": "in_progress"},
                keys,
                backend=self.backend,
                simulated=simulated,
                run_id=ahead["run_id"],
                created_at=created,
                linked=ahead["batch_id"],
                request_bytes=ahead["request_bytes"],
                estimated_usd=ahead["estimated_usd"],
                adopted=True,
            )
            self.ledger.merge(BATCHES, [real, with_state(ahead, CREATED, linked_batch_id=batch_id)])
            entries = self._take(keys, pending, batch_id, created)
            yield from self._collect(batch_id, entries, retry, created, ahead["run_id"], real, keys, results)
            return
        log.info(
            "write-ahead batch %s of run %s was never created; its requests are sent",
            ahead["batch_id"],
            ahead["run_id"],
        )
        self.ledger.merge(BATCHES, [with_state(ahead, NOT_CREATED)])

    def _take(self, keys, pending, batch_id, created_at) -> dict[str, _Pending]:
        entries = {k: pending.pop(k) for k in keys if k in pending}
        for entry in entries.values():
            entry.submissions += 1
            entry.sent_at = created_at
            entry.batch_id = batch_id
            wire, dropped = self.translator.wire(entry.request.body, cache_prefix=entry.request.cache_prefix)
            entry.sending = Sending(self.translator.api_version, request_sha256(wire), dict(dropped))
            entry.wire = wire
        return entries

    # -- results ------------------------------------------------------------------------------------

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
        row: dict[str, Any],
        keys: Sequence[str] | None = None,
        results: list[Any] | None = None,
    ) -> Iterator[Sent]:
        batch, simulated = self._poll(batch_id)
        keys = list(keys) if keys is not None else list(entries)
        items = results if results is not None else self._results(batch_id, batch)
        state = "ended" if items is not None else RESULTS_EXPIRED
        seen: set[str] = set()
        for item in items or ():
            if item.custom_id in seen:
                continue
            seen.add(item.custom_id)
            entry = entries.get(item.custom_id)
            outcome = item.result.model_dump(mode="json")
            if entry is None:
                self.unclaimed.append(Unclaimed(item.custom_id, batch_id, outcome, simulated))
                continue
            done = self._outcome(batch_id, entry, outcome, simulated)
            if done is None:
                retry[item.custom_id] = entry
            else:
                yield done
        for key, entry in entries.items():
            if key not in seen:  # a result the batch never listed (or can no longer list): submit it again
                entry.batch_id = batch_id
                why = "results past the download window" if state == RESULTS_EXPIRED else "returned no result"
                entry.last_error = ("errored", f"batch {batch_id} {why} for this request")
                entry.attempts.append(self._attempt(entry, batch_id, "errored", entry.last_error[1]))
                retry[key] = entry
        # every result is in the ledger before the batch is marked ended
        self.flush()
        ended = batch_row(batch, keys, backend=self.backend, simulated=simulated, run_id=run_id, created_at=created_at)
        counts = {k: ended[k] for k in ("succeeded", "errored", "expired", "canceled", "ended_at")}
        self.ledger.merge(BATCHES, [with_state(row, state, simulated=row["simulated"] or simulated, **counts)])

    def _results(self, batch_id: str, batch: dict[str, Any]) -> Iterator[Any] | None:
        """The batch's results as a stream; None when they are past the 29-day download window
        (the batch is archived, or its results URL answers 404): billed, but nothing to read."""
        if not batch.get("archived_at") and batch.get("results_url"):
            try:
                return iter(self.client.messages.batches.results(batch_id))
            except anthropic.NotFoundError:
                pass
        log.warning(
            "batch %s: its results are past the %d-day download window; its requests are sent again",
            batch_id,
            RESULTS_DAYS,
        )
        return None

    def _attempt(self, entry: _Pending, batch_id: str, status: str, error: str | None) -> dict[str, Any]:
        at = entry.sent_at.isoformat() if entry.sent_at else None
        return {"run_id": self.run_id, "at": at, "via": batch_id, "status": status, "error": error}

    def _outcome(self, batch_id: str, entry: _Pending, result: dict[str, Any], simulated: bool) -> Sent | None:
        """The entry's terminal result, or None when it should go into the next batch."""
        kind = result.get("type")
        request = entry.request
        entry.simulated = simulated
        entry.batch_id = batch_id
        if kind == "succeeded":
            entry.attempts.append(self._attempt(entry, batch_id, "succeeded", None))
            done = succeeded(
                request, result["message"], attempts=entry.submissions, simulated=simulated, batch_id=batch_id
            )
            return self._sent(entry, done)
        if kind == "errored":
            error = (result.get("error") or {}).get("error") or {}
            error_type, message = error.get("type", "api_error"), error.get("message", "")
            text = f"batch {error_type}: {message}"
            entry.attempts.append(self._attempt(entry, batch_id, "errored", text))
            if error_type in PERMANENT_ERROR_TYPES:
                if error_type == "invalid_request_error" and self.translator.learn(entry.wire or {}, message):
                    entry.submissions -= 1  # a refused parameter does not count against the retry rounds
                    return None
                result_ = failed(
                    request, "errored", text, attempts=entry.submissions, simulated=simulated, batch_id=batch_id
                )
                return self._sent(entry, result_)
            entry.last_error = ("errored", text)
            return None
        if kind == "expired":
            entry.last_error = ("expired", f"batch {batch_id}: the request expired before it was processed")
            entry.attempts.append(self._attempt(entry, batch_id, "expired", entry.last_error[1]))
            return None
        if kind == "canceled":
            entry.attempts.append(self._attempt(entry, batch_id, "canceled", f"batch {batch_id} was canceled"))
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
        entry.attempts.append(self._attempt(entry, batch_id, "errored", entry.last_error[1]))
        return None

    def _give_up(self, entry: _Pending) -> Sent:
        status, message = entry.last_error or ("errored", "no result")
        if status == "too_large":
            status = "errored"
        text = f"{message} (after {entry.submissions} batch submissions)"
        result = failed(
            entry.request, status, text, attempts=entry.submissions, simulated=entry.simulated, batch_id=entry.batch_id
        )
        return self._sent(entry, result)

    def _sent(self, entry: _Pending, result: LLMResult) -> Sent:
        result = replace(result, dropped=tuple(sorted(entry.sending.dropped)))
        sampling = sampling_record(entry.request.body, entry.sending.dropped)
        return Sent(entry.request, result, sampling, entry.sent_at or now(), None, entry.sending, tuple(entry.attempts))


def _ts(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
