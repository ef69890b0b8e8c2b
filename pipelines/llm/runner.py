"""``run``: answer a list of requests from the ledger where it can, send the rest.

Order of work: drop duplicate keys; read the stored results; estimate what
the rest would cost and refuse (``BudgetExceeded``) before sending anything
when that is above the cap; send (batches or one by one); write one
``llm_requests`` row per result, in chunks of ``flush_every`` rows or
``flush_seconds``, and always before returning or raising, so a result that
came back is not lost. Only a process killed outright (SIGKILL, OOM) between
two flushes of a direct run loses the results since the last flush; those
requests are sent, and billed, again on re-run, and the ledger shows it. A
batch run has no such window: results stay with the provider until read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import anthropic

from pipelines.llm import direct
from pipelines.llm.batches import BatchSender
from pipelines.llm.estimate import estimate
from pipelines.llm.ledger import REQUESTS, Ledger, request_row, stored_results
from pipelines.llm.request import BudgetExceeded, Estimate, LLMRequest, LLMResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SendOptions:
    backend: str
    max_retries: int = 6
    max_workers: int = 8
    poll_interval: float = 30.0
    batch_rounds: int = 3
    max_batch_requests: int = 10_000
    flush_every: int = 200
    supports_batches: bool = True


@dataclass
class LedgerWriter:
    """Buffers ``llm_requests`` rows and merges them in chunks."""

    ledger: Ledger
    backend: str
    run_id: str
    flush_every: int = 200
    flush_seconds: float = 10.0
    rows: list[dict[str, Any]] = field(default_factory=list)
    written: int = 0
    last_flush: float = field(default_factory=time.monotonic)

    def add(self, sent: direct.Sent) -> None:
        self.rows.append(
            request_row(
                sent.request,
                sent.result,
                backend=self.backend,
                run_id=self.run_id,
                sent_at=sent.sent_at,
                latency_ms=sent.latency_ms,
                sampling=sent.sampling,
            )
        )
        if len(self.rows) >= self.flush_every or time.monotonic() - self.last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        self.last_flush = time.monotonic()
        if self.rows:
            rows, self.rows = self.rows, []
            self.ledger.merge(REQUESTS, rows)
            self.written += len(rows)


def unique(requests: Sequence[LLMRequest]) -> list[LLMRequest]:
    """One request per key (the same body, mode and sample is one request)."""
    seen: dict[str, LLMRequest] = {}
    for request in requests:
        seen.setdefault(request.key, request)
    return list(seen.values())


def plan(
    requests: Sequence[LLMRequest],
    ledger: Ledger,
    *,
    batch: bool,
    count_tokens: Callable[[LLMRequest], int] | None = None,
) -> tuple[dict[str, LLMResult], list[LLMRequest], Estimate]:
    """(stored results by key, the requests to send, what sending them could cost)."""
    todo = unique(requests)
    stored = stored_results(ledger, [r.key for r in todo])
    pending = [r for r in todo if r.key not in stored]
    return stored, pending, estimate(pending, batch=batch, count_tokens=count_tokens)


def run(
    connect: Callable[[], anthropic.Anthropic],
    requests: Sequence[LLMRequest],
    ledger: Ledger,
    *,
    run_id: str,
    options: SendOptions,
    batch: bool = True,
    budget_usd: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    count_tokens: Callable[[LLMRequest], int] | None = None,
) -> Iterator[LLMResult]:
    """Results for ``requests`` in any order, one per distinct key (see module docstring).

    ``connect`` builds the client, only when something has to be sent.
    """
    use_batch = batch and options.supports_batches
    stored, pending, cost = plan(requests, ledger, batch=use_batch, count_tokens=count_tokens)
    if budget_usd is not None and cost.usd > budget_usd:
        raise BudgetExceeded(cost, budget_usd)
    total = len(stored) + len(pending)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    for result in stored.values():
        tick()
        yield result
    if not pending:
        return
    log.info("sending %d LLM requests (%s, up to $%.4f)", len(pending), "batch" if use_batch else "direct", cost.usd)
    client = connect()
    writer = LedgerWriter(ledger, options.backend, run_id, options.flush_every)
    try:
        if use_batch:
            sender = BatchSender(
                client,
                ledger,
                options.backend,
                run_id,
                flush=writer.flush,
                poll_interval=options.poll_interval,
                rounds=options.batch_rounds,
                max_batch_requests=options.max_batch_requests,
            )
            for sent in sender.run(pending):
                writer.add(sent)
                tick()
                yield sent.result
        else:
            yield from _direct(client, pending, writer, options, tick)
    finally:
        writer.flush()


def _direct(
    client: anthropic.Anthropic,
    pending: list[LLMRequest],
    writer: LedgerWriter,
    options: SendOptions,
    tick: Callable[[], None],
) -> Iterator[LLMResult]:
    names = direct.create_kwargs(client)
    pool = ThreadPoolExecutor(max_workers=max(1, options.max_workers), thread_name_prefix="llm")
    futures: list[Future[direct.Sent]] = [
        pool.submit(direct.send, client, r, names, options.max_retries) for r in pending
    ]
    recorded: set[int] = set()
    try:
        for future in as_completed(futures):
            sent = future.result()
            writer.add(sent)
            recorded.add(id(future))
            tick()
            yield sent.result
    finally:
        # stopped early (the caller broke off, or an error): requests already in flight
        # still come back and are billed, so wait for them and record them
        for future in futures:
            if id(future) in recorded or future.cancel():
                continue
            try:
                writer.add(future.result())
            except Exception:  # noqa: BLE001  (the first error is already propagating)
                log.exception("an LLM request failed while the run was stopping")
        pool.shutdown(wait=True)
