"""Spreading redaction over processes, one analyzer per worker.

presidio and spaCy hold the GIL, so threads do not help. Each worker is a
process of its own (spawned once, its redactor and NER model loaded once),
talking to the caller over a pipe. It either redacts whole traces
(``redact_shards``: rows are split by trace id, so every trace's
placeholders are still numbered in one place and the output is the same as
in one process) or analyzes batches of texts (``analyze``).

A line two shards share (a quoted turn, a system prompt line) is read by NER
once: after its collect pass each worker sends the lines NER would read, the
caller gives every line wanted by more than one worker to one of them, and
relays the names the owner found to the others (``_exchange_lines``); a
``ProcessPoolExecutor`` cannot send a task to a chosen worker, so these are
dedicated processes. Workers are spawned, not forked: the caller may be a
Dagster run with threads, and a fork taken while another thread holds a
lock can hang. Small jobs stay in the calling process, where starting
workers would cost more than it saves.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
import threading
import traceback
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, NoReturn

from pipelines.redact.analyzer import AnalysisError, DetectorSettings, Hit, Request, TextAnalyzer
from pipelines.redact.keys import KeyRing
from pipelines.redact.policy import Policy
from pipelines.redact.row_fields import CALL_FIELDS, SPAN_FIELDS

if TYPE_CHECKING:
    from pipelines.redact.redactor import Redactor

# What a worker needs of each row: the text-bearing columns, the hashes, and
# what orders a trace and fills an audit row.
_ROW_KEYS = ("trace_id", "span_id", "occurred_at", "occurred_date", "flags")
CALL_COLUMNS = (
    *_ROW_KEYS, "call_id", "rendered_request_sha256", "request_sha256", "request_hash_matches", "block_hashes",
    "template_id", "template_version", *CALL_FIELDS,
)  # fmt: skip
SPAN_COLUMNS = (*_ROW_KEYS, "span_key", "call_id", *SPAN_FIELDS)

# the caller redacts this share of the traces itself (shard 0), the workers the
# rest: it also pickles their rows and finishes every row, so it takes less
CALLER_PERCENT = 35
# below these, one process is faster than starting workers (about 2 s each)
MIN_POOL_CHARS = 2_000_000
MIN_POOL_ROWS = 10_000
BATCH_CHARS = 200_000
BATCH_TEXTS = 256
STOP_SECONDS = 10


@dataclass(frozen=True)
class WorkerConfig:
    policy: Policy
    mode: str
    keys: KeyRing
    ner: bool


class WorkerFailed(RuntimeError):
    """A worker process failed. The message names the worker, the exception class
    and where it was raised (file and line), never the text being redacted."""


# -- the worker process -----------------------------------------------------


def _serve(config: WorkerConfig, conn: Connection) -> None:
    """A worker's life: build the redactor (the NER model loads now, while the
    caller still prepares the rows), then answer requests until told to stop."""
    from pipelines.redact.redactor import Redactor

    redactor = Redactor(config.policy, config.mode, config.keys, workers=1, ner=config.ner)
    redactor.pool.start_analyzer()
    # No cyclic GC in a worker: a shard is millions of objects, and collections
    # during its unpickling alone doubled its cost. Redaction makes almost no
    # reference cycles (a few hundred objects a shard, left to the process's end).
    gc.freeze()
    gc.disable()
    while True:
        try:
            message = conn.recv()
        except EOFError:
            _exit()
        kind = message[0]
        if kind == "stop":
            _exit()
        try:
            if kind == "analyze":
                conn.send(("analyzed", redactor.pool.local.analyze_many(message[1])))
            elif kind == "redact":
                conn.send(("done", _redact_shard(redactor, conn, *message[1:])))
        except Exception as e:  # the message may quote the text: send where, not what
            conn.send(("error", _where(e)))
            message = e = None
            gc.collect()  # a traceback's frames hold the shard in a cycle


def _exit() -> NoReturn:
    """End the worker without tearing its heap down: freeing a day's analysis
    caches object by object took the caller's ``close()`` about 2 s. A worker
    holds no files or buffers to flush but its standard streams."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _where(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    at = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    detail = f": {e}" if isinstance(e, AnalysisError | WorkerFailed) else ""
    return f"{type(e).__name__}{at}{detail}"


def _redact_shard(
    redactor: Redactor,
    conn: Connection,
    calls: list[dict],
    spans: list[dict],
    now: datetime,
    screen: tuple[str, ...] | None,
    peers: int,
) -> tuple[list, list, list, dict, dict | None]:
    """``Redactor.redact_columns`` of a shard, its NER lines shared with the other
    workers; with ``screen`` patterns it also gives the residual-PII classes of
    the redacted text columns (found as they are written)."""
    redactor.line_exchange = (lambda todo: _exchange_lines(redactor.pool.local, conn, todo, peers)) if peers else None
    try:
        return redactor.redact_columns(calls, spans, now, screen)
    finally:
        redactor.line_exchange = None


def _exchange_lines(analyzer: TextAnalyzer, conn: Connection, todo: Sequence[Request], peers: int) -> None:
    """Between the collect pass and analysis: tell the caller which lines NER
    would read here; read the ones this worker is given (and send the names of
    those another worker also wants), and learn the rest from the other workers."""
    wanted = analyzer.ner_lines(todo)
    conn.send(("lines", wanted))
    _, elsewhere, shared = _expect(conn, "assigned")
    others = set(elsewhere)
    analyzer.read_lines([line for line in wanted if line not in others] if others else wanted)
    conn.send(("names", analyzer.names_of_lines(shared)))
    for _ in range(peers):
        analyzer.learn_names(_expect(conn, "names")[1])


def _expect(conn: Connection, kind: str) -> tuple:
    message = conn.recv()
    if message[0] != kind:
        raise WorkerFailed(f"expected a {kind!r} message, got {message[0]!r}")
    return message


# -- the calling process ----------------------------------------------------


def _columns(row: dict, names: tuple[str, ...]) -> dict:
    return {name: row.get(name) for name in names}


def batches(requests: Sequence[Request]) -> Iterator[list[Request]]:
    batch: list[Request] = []
    size = 0
    for request in requests:
        batch.append(request)
        size += len(request.text)
        if size >= BATCH_CHARS or len(batch) >= BATCH_TEXTS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def shard_of(trace_id: Any, shards: int) -> int:
    """Stable across processes and runs (``hash()`` of a str is not). Shard 0 is
    the caller's: CALLER_PERCENT of the traces, the rest spread evenly."""
    if shards < 2:
        return 0
    crc = zlib.crc32(str(trace_id or "").encode())
    if crc % 100 < CALLER_PERCENT:
        return 0
    return 1 + (crc // 100) % (shards - 1)


def owners(wanted: Sequence[Sequence[str]], first: bool = False) -> tuple[list[list[str]], list[list[str]]]:
    """Given the lines each worker's NER would read: per worker, the lines another
    worker reads for it, and the lines it reads that others also want. A line
    wanted by several workers goes to one of them, chosen by its crc32; with
    ``first``, to the first worker whenever it wants it (the caller, which then
    never waits for another's names)."""
    needers: dict[str, list[int]] = {}
    for i, lines in enumerate(wanted):
        for line in lines:
            needers.setdefault(line, []).append(i)
    elsewhere: list[list[str]] = [[] for _ in wanted]
    shared: list[list[str]] = [[] for _ in wanted]
    for line, who in needers.items():
        if len(who) < 2:
            continue
        if first and who[0] == 0:
            owner = 0
        else:
            owner = who[zlib.crc32(line.encode("utf-8", "surrogatepass")) % len(who)]
        shared[owner].append(line)
        for i in who:
            if i != owner:
                elsewhere[i].append(line)
    return elsewhere, shared


class _Worker:
    """The calling side of one worker process."""

    def __init__(self, index: int, config: WorkerConfig):
        context = multiprocessing.get_context("spawn")
        self.index = index
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(config, child), name=f"tracelake-redact-{index}")
        self.process.daemon = True
        self.process.start()
        child.close()

    def send(self, message: tuple) -> None:
        self.conn.send(message)

    def receive(self, kind: str | None = None) -> tuple:
        try:
            message = self.conn.recv()
        except EOFError:
            raise WorkerFailed(
                f"redaction worker {self.index} exited (exit code {self.process.exitcode}); "
                "check the machine's memory and the worker's log"
            ) from None
        if message[0] == "error":
            raise WorkerFailed(f"redaction worker {self.index} failed with {message[1]}")
        if kind is not None and message[0] != kind:
            raise WorkerFailed(f"redaction worker {self.index} sent {message[0]!r}, expected {kind!r}")
        return message

    def stop(self) -> None:
        try:
            self.conn.send(("stop",))
        except (OSError, ValueError):
            pass
        self.conn.close()  # a worker still waiting for a message gets end-of-file and exits
        self.process.join(STOP_SECONDS)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()


class AnalyzerPool:
    def __init__(self, settings: DetectorSettings, workers: int = 1, config: WorkerConfig | None = None):
        self.settings = settings
        self.workers = max(1, workers)
        self.config = config
        self._local: TextAnalyzer | None = None
        self._processes: list[_Worker] = []

    @property
    def local(self) -> TextAnalyzer:
        if self._local is None:
            self._local = TextAnalyzer(self.settings)
        return self._local

    @property
    def started(self) -> bool:
        """Whether worker processes were started (and are still up)."""
        return bool(self._processes)

    def start_analyzer(self) -> TextAnalyzer:
        return self.local

    def start_workers(self) -> None:
        """Start now the worker processes ``redact_shards`` will use (the caller is the
        other shard), so that their start and NER model loading overlap the caller's work."""
        self._started(self.workers - 1)

    def _started(self, count: int | None = None) -> list[_Worker]:
        """``count`` worker processes (default ``workers``), started now if fewer are up."""
        count = self.workers if count is None else count
        if len(self._processes) < count:
            if self.config is None:
                raise RuntimeError("a worker pool needs the redactor's configuration")
            self._processes += [_Worker(i, self.config) for i in range(len(self._processes), count)]
        return self._processes[:count]

    def ner_stats(self) -> dict[str, int]:
        """NER's counters in this process so far (texts analyzed in workers are not in them)."""
        return self._local.ner_stats() if self._local is not None else {}

    def parallel_rows(self, rows: int) -> bool:
        return self.workers > 1 and self.config is not None and rows >= MIN_POOL_ROWS

    def analyze(self, requests: Sequence[Request], here: bool = False) -> list[list[Hit]]:
        """Hits per request; ``here``: in this process (a shard of ``redact_shards`` is)."""
        chars = sum(len(r.text) for r in requests)
        results: list[list[Hit]] = []
        if here or self.workers == 1 or self.config is None or chars < MIN_POOL_CHARS:
            for batch in batches(requests):
                results += self.local.analyze_many(batch)
            return results
        # one batch out per worker at a time: a worker blocked sending its result
        # while the caller is blocked sending it the next batch would hang both
        workers = self._started()
        todo = list(enumerate(batches(requests)))[::-1]
        done: dict[int, list[list[Hit]]] = {}
        busy: dict[Connection, tuple[_Worker, int]] = {}
        for worker in workers:
            if todo:
                at, batch = todo.pop()
                worker.send(("analyze", batch))
                busy[worker.conn] = (worker, at)
        while busy:
            for conn in wait(list(busy)):
                worker, at = busy.pop(conn)
                done[at] = worker.receive("analyzed")[1]
                if todo:
                    at, batch = todo.pop()
                    worker.send(("analyze", batch))
                    busy[worker.conn] = (worker, at)
        for at in sorted(done):
            results += done[at]
        return results

    def redact_shards(
        self,
        calls: Sequence[dict],
        spans: Sequence[dict],
        now: datetime,
        screen: tuple[str, ...] | None,
        here: Callable[[list[dict], list[dict], Callable[[Sequence[Request]], None]], tuple],
    ) -> Iterator[tuple[list[int], list[int], tuple[list, list, list, dict, dict | None]]]:
        """Rows split by trace id over the caller and ``workers - 1`` processes: (call
        positions, span positions, ``_redact_shard`` of those rows) per shard, as each
        shard is done. Shard 0 is redacted here by ``here(calls, spans, line_exchange)``
        while the workers redact theirs: no pickling of its rows, one process fewer to start."""
        workers = self._started(self.workers - 1)  # what start_workers starts
        n = len(workers) + 1
        call_at: list[list[int]] = [[] for _ in range(n)]
        span_at: list[list[int]] = [[] for _ in range(n)]
        for i, row in enumerate(calls):
            call_at[shard_of(row.get("trace_id"), n)].append(i)
        for i, row in enumerate(spans):
            span_at[shard_of(row.get("trace_id"), n)].append(i)
        # only what redaction reads goes through the pipe: pickling whole rows cost more than it saved.
        # Sent from a thread: a worker still starting reads nothing, and the caller has its own shard.
        senders = []
        for worker in workers:
            at = worker.index + 1
            shard = (
                [_columns(calls[i], CALL_COLUMNS) for i in call_at[at]],
                [_columns(spans[i], SPAN_COLUMNS) for i in span_at[at]],
            )
            sender = threading.Thread(target=worker.send, args=(("redact", *shard, now, screen, n - 1),), daemon=True)
            sender.start()
            senders.append(sender)
        shard = None
        elsewhere: list[list[str]] = [[] for _ in range(n)]

        def exchange(todo: Sequence[Request]) -> None:
            """The caller's side of the NER line exchange, between its collect pass and analysis.
            Every line the caller wants is its own (``owners(first=True)``): it reads them and
            sends the names out, and never waits for a worker's but to relay them between workers."""
            for sender in senders:
                sender.join()
            senders.clear()
            analyzer = self.local
            mine = analyzer.ner_lines(todo)
            theirs, shared = owners([mine, *(worker.receive("lines")[1] for worker in workers)], first=True)
            elsewhere[:] = theirs
            for worker in workers:
                worker.send(("assigned", theirs[worker.index + 1], shared[worker.index + 1]))
            analyzer.read_lines(mine)
            names = analyzer.names_of_lines(shared[0])
            for worker in workers:
                # from threads: a worker may be blocked sending its own names to the caller
                wanted = set(theirs[worker.index + 1])
                message = ("names", {k: v for k, v in names.items() if k in wanted})
                senders.append(threading.Thread(target=worker.send, args=(message,), daemon=True))
                senders[-1].start()
            if len(workers) > 1:
                names_from = {worker.index: worker.receive("names")[1] for worker in workers}
                for sender in senders:
                    sender.join()
                senders.clear()
                for other in workers:
                    wanted = set(theirs[other.index + 1])
                    for index, found in names_from.items():
                        if index != other.index:
                            other.send(("names", {k: v for k, v in found.items() if k in wanted}))

        here_at = (call_at[0], span_at[0])
        payload = here([calls[i] for i in here_at[0]], [spans[i] for i in here_at[1]], exchange)
        for sender in senders:
            sender.join()
        yield here_at[0], here_at[1], payload
        pending = {worker.conn: worker for worker in workers}
        while pending:
            for conn in wait(list(pending)):
                worker = pending[conn]
                kind, payload = worker.receive()
                if kind == "done":
                    del pending[conn]
                    yield call_at[worker.index + 1], span_at[worker.index + 1], payload
                elif kind != "names" or len(workers) > 1:  # one worker's names (none it owns) end here
                    raise WorkerFailed(f"redaction worker {worker.index} sent {kind!r} while redacting")

    def close(self) -> None:
        for worker in self._processes:
            worker.stop()
        self._processes = []
