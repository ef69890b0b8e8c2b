"""``run``: answer a list of requests from the ledger where it can, send the rest.

Order of work: drop duplicate keys; read the stored rows; a final one (a
success, an error the provider gives that request every time, or a request
that has failed in ``retry_runs`` runs already) answers its request. The rest
is checked before anything is sent: a request on a retired model stops the run
(``RetiredModel``, saying what to set), and what the run has been billed so far
plus what the rest could cost must stay under the run's cap (``BudgetExceeded``).
Then the rest is sent (batches or one by one), translated for the API version,
and one ``llm_requests`` row per result is written, in chunks, always before
returning or raising, so a result that came back is not lost. Only a process
killed outright (SIGKILL, OOM) between two flushes of a direct run loses the
results since the last flush; those requests are sent, and billed, again on
re-run, and the ledger shows it. A batch run has no such window (see batches.py).

Nothing here builds a client until something has to be sent: a run whose
requests are all answered in the ledger needs no credentials.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any

import anthropic

from pipelines.llm import direct
from pipelines.llm.batch_split import MAX_BATCH_BYTES, MAX_BATCH_REQUESTS
from pipelines.llm.batches import BatchSender
from pipelines.llm.estimate import estimate, request_usd
from pipelines.llm.ledger import (
    BATCHES,
    REQUESTS,
    History,
    Ledger,
    Unclaimed,
    request_row,
    result_from_row,
    run_spend,
    settled,
    stored_rows,
    unclaimed_row,
)
from pipelines.llm.lifecycle import Lifecycle, UnmappedModel
from pipelines.llm.params import Translator, refused_parameter
from pipelines.llm.request import BudgetExceeded, Estimate, LLMRequest, LLMResult, is_permanent, sealed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SendOptions:
    backend: str
    max_retries: int = 6
    max_workers: int = 8
    poll_interval: float = 30.0
    batch_rounds: int = 3
    max_batch_requests: int = MAX_BATCH_REQUESTS
    max_batch_bytes: int = MAX_BATCH_BYTES
    flush_every: int = 200
    batch_flush_every: int = 20_000
    supports_batches: bool = True
    retry_runs: int = 3


class RetiredModel(Exception):
    """Requests ask for models the API no longer serves: raised before anything is sent."""

    def __init__(self, models: dict[str, int], problems: list[str]) -> None:
        self.models = models
        listed = ", ".join(f"{n} on {m}" for m, n in sorted(models.items()))
        super().__init__(f"{listed}: " + " ".join(problems))


@dataclass
class LedgerWriter:
    """Buffers ``llm_requests`` rows and merges them in chunks."""

    ledger: Ledger
    backend: str
    run_id: str
    flush_every: int = 200
    flush_seconds: float = 10.0
    history: dict[str, History] = field(default_factory=dict)
    unclaimed: list[Unclaimed] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    written: int = 0
    last_flush: float = field(default_factory=time.monotonic)

    def add(self, sent: direct.Sent) -> None:
        """Record ``sent`` (sealed already: ``sealed_sent``)."""
        self.rows.append(
            request_row(
                sent.request,
                sent.result,
                backend=self.backend,
                run_id=self.run_id,
                sent_at=sent.sent_at,
                latency_ms=sent.latency_ms,
                sampling=sent.sampling,
                sending=sent.sending,
                attempts=sent.attempts,
                history=self.history.get(sent.request.key, History()),
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
        if self.unclaimed:
            # results of a resumed batch that no request of this run asked for: billed, so recorded,
            # but never over the row of the run that did ask (alive and recording it now, or killed
            # after recording it): that row says what was sent, for which call, with which parameters
            items, self.unclaimed = self.unclaimed, []
            rows = [unclaimed_row(item, backend=self.backend, run_id=self.run_id) for item in items]
            recorded = stored_rows(self.ledger, [row["request_key"] for row in rows])
            rows = [row for row in rows if row["request_key"] not in recorded]
            if rows:
                self.ledger.merge(REQUESTS, rows, only_new=True)
                self.written += len(rows)


def sealed_sent(sent: direct.Sent) -> direct.Sent:
    """A decrypted request's result and attempts with its plaintexts back as tokens (``LLMRequest.seal``)."""
    seal = sent.request.seal
    if seal is None:
        return sent
    return replace(sent, result=sealed(sent.request, sent.result), attempts=seal(sent.attempts))


def unique(requests: Sequence[LLMRequest]) -> list[LLMRequest]:
    """One request per key (the same body, mode and sample is one request)."""
    seen: dict[str, LLMRequest] = {}
    for request in requests:
        seen.setdefault(request.key, request)
    return list(seen.values())


@dataclass(frozen=True)
class Plan:
    """What ``run`` would do: answer from the ledger, or send (and at what cost)."""

    stored: dict[str, LLMResult]
    pending: list[LLMRequest]
    estimate: Estimate
    history: dict[str, History]
    resent: Counter  # why stored requests are sent again: {"failed_before": n, "refused_parameter": n}


def stored_is_final(row: dict[str, Any], request: LLMRequest, retry_runs: int) -> tuple[bool, str | None]:
    """(whether a stored row answers its request, why it is sent again when it does not)."""
    if row["status"] not in ("succeeded", "errored", "expired", "canceled", "refused_budget"):
        return False, "unfinished"
    if row["status"] == "succeeded":
        return True, None
    runs = row.get("runs") or 1
    if refused_parameter(row["error"] or "", request.body) is not None and runs < retry_runs:
        # refused for a parameter: the translation removes it now, so the request is sent again, fixed
        return False, "refused_parameter"
    if is_permanent(row["status"], row["error"]):
        return True, None
    if runs >= retry_runs:
        return True, None  # failed in retry_runs runs: given up, kept as the answer
    return False, "failed_before"


def plan(
    requests: Sequence[LLMRequest],
    ledger: Ledger,
    *,
    batch: bool,
    retry_runs: int = 3,
    count_tokens: Callable[[LLMRequest], int] | None = None,
    lifecycle: Lifecycle | None = None,
) -> Plan:
    """What is answered by the ledger, what has to be sent and what sending it could cost.
    With ``lifecycle``, a request to send on a retired model raises ``RetiredModel`` first
    (before its tokens are counted)."""
    todo = unique(requests)
    rows = stored_rows(ledger, [r.key for r in todo])
    stored: dict[str, LLMResult] = {}
    pending: list[LLMRequest] = []
    history: dict[str, History] = {}
    resent: Counter = Counter()
    for request in todo:
        row = rows.get(request.key)
        if row is not None:
            final, why = stored_is_final(row, request, retry_runs)
            if final:
                stored[request.key] = result_from_row(row)
                continue
            history[request.key] = History.of(row)
            resent[why] += 1
        pending.append(request)
    if pending and lifecycle is not None:
        retired_models(pending, lifecycle)
    cost = estimate(pending, batch=batch, count_tokens=count_tokens) if pending else Estimate(0, 0, 0, 0.0)
    return Plan(stored, pending, cost, history, resent)


def retired_models(requests: Sequence[LLMRequest], lifecycle: Lifecycle, today: date | None = None) -> None:
    """Raise ``RetiredModel`` when any request asks for a model retired by ``today``."""
    retired: Counter = Counter()
    problems: dict[str, str] = {}
    for request in requests:
        model = str(request.model or "")
        status = lifecycle.status(model, today)
        if status.state != "retired":
            continue
        retired[model] += 1
        if model not in problems:
            try:
                substitute = lifecycle.replacement(model, today)
                problems[model] = (
                    f"{model} was retired on {status.retired_on}; the API answers not_found_error. Replay sends "
                    f"such calls on {substitute} (the lifecycle file maps it); send this request on it too."
                )
            except UnmappedModel as e:
                problems[model] = str(e)
    if retired:
        raise RetiredModel(dict(retired), list(problems.values()))


def run(
    connect: Callable[[], anthropic.Anthropic],
    requests: Sequence[LLMRequest],
    ledger: Ledger,
    *,
    run_id: str,
    options: SendOptions,
    translator: Translator,
    lifecycle: Lifecycle | None = None,
    batch: bool = True,
    budget_usd: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    count_tokens: Callable[[LLMRequest], int] | None = None,
) -> Iterator[LLMResult]:
    """Results for ``requests`` in any order, one per distinct key (see module docstring).

    ``connect`` builds the client, only when something has to be sent.
    """
    use_batch = batch and options.supports_batches
    work = plan(
        requests, ledger, batch=use_batch, retry_runs=options.retry_runs, count_tokens=count_tokens, lifecycle=lifecycle
    )
    if work.pending and budget_usd is not None:
        _, spent = run_spend(ledger, run_id)
        if spent + work.estimate.usd > budget_usd:
            raise BudgetExceeded(work.estimate, budget_usd, spent)
    total = len(work.stored) + len(work.pending)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    # batches a killed run left open although their results are all recorded: marked ended now
    if work.stored and (done_batches := settled(ledger, options.backend, work.stored)):
        ledger.merge(BATCHES, done_batches)
    for result in work.stored.values():
        tick()
        yield result
    if not work.pending:
        return
    again = f" ({', '.join(f'{n} {why}' for why, n in work.resent.items())} sent again)" if work.resent else ""
    log.info(
        "sending %d LLM requests%s (%s, up to $%.4f)",
        len(work.pending),
        again,
        "batch" if use_batch else "direct",
        work.estimate.usd,
    )
    client = connect()
    flush_every = options.batch_flush_every if use_batch else options.flush_every
    writer = LedgerWriter(ledger, options.backend, run_id, flush_every, history=work.history)
    try:
        if use_batch:
            sender = BatchSender(
                client,
                ledger,
                options.backend,
                run_id,
                flush=writer.flush,
                translator=translator,
                estimate_usd=lambda r: request_usd(r, batch=True),
                poll_interval=options.poll_interval,
                rounds=options.batch_rounds,
                max_batch_requests=options.max_batch_requests,
                max_batch_bytes=options.max_batch_bytes,
            )
            writer.unclaimed = sender.unclaimed  # written with the batch's other results
            for sent in sender.run(work.pending):
                sent = sealed_sent(sent)
                writer.add(sent)
                tick()
                yield sent.result
        else:
            yield from _direct(client, work.pending, writer, options, translator, run_id, tick)
    finally:
        writer.flush()


def _direct(
    client: anthropic.Anthropic,
    pending: list[LLMRequest],
    writer: LedgerWriter,
    options: SendOptions,
    translator: Translator,
    run_id: str,
    tick: Callable[[], None],
) -> Iterator[LLMResult]:
    names = direct.create_kwargs(client)
    pool = ThreadPoolExecutor(max_workers=max(1, options.max_workers), thread_name_prefix="llm")
    futures: list[Future[direct.Sent]] = [
        pool.submit(direct.send, client, r, names, options.max_retries, translator, run_id) for r in pending
    ]
    recorded: set[int] = set()
    try:
        for future in as_completed(futures):
            sent = sealed_sent(future.result())
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
                writer.add(sealed_sent(future.result()))
            except Exception:  # noqa: BLE001  (the first error is already propagating)
                log.exception("an LLM request failed while the run was stopping")
        pool.shutdown(wait=True)
