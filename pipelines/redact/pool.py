"""Spreading redaction over processes, one analyzer per worker.

presidio and spaCy hold the GIL, so threads do not help. Each worker is a
process of its own (spawned once, its redactor and NER model loaded once),
talking to the caller over a pipe. It either redacts whole traces
(``redact_shards``) or analyzes batches of texts (``analyze``).

``redact_shards``: the day's traces are a queue that the caller and the
workers take chunks of until it is empty (``TraceQueue``: each take a share
of what is left, so the chunks shrink and everyone finishes at about the same
time, whatever each process's speed, the load on the machine or a worker's
start-up). Every trace is redacted whole in one chunk, so its placeholders are
numbered in one place and the output is the same whatever the split, and the
same as in one process. A worker is fed by two threads of the caller, one
sending it its next chunk while it redacts the one before, one taking its
results back; the caller finishes them between chunks of its own. With each
chunk go the names of the lines NER read elsewhere since the last one, so a
line many traces share is read once per process at most.

Workers are spawned, not forked: the caller may be a Dagster run with
threads, and a fork taken while another thread holds a lock can hang. Small
jobs stay in the calling process, where starting workers would cost more than
it saves.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import queue
import socket
import struct
import sys
import threading
import traceback
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

# a take from the trace queue is this share of what is left per process taking
# (1/4 of it with two), and never less than 1/MIN_CHUNK_DIVISOR of the day
TAKE_DIVISOR = 2
MIN_CHUNK_DIVISOR = 80
# chunks a worker holds at once: the one it redacts and the next, already sent
PREFETCH = 2
# what a row costs to redact, roughly: its JSON text and a fixed part
ROW_COST = 1_000
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


def _serve(config: WorkerConfig, conn: Connection, names_conn: Connection) -> None:
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
                conn.send(("done", _redact_shard(redactor, names_conn, *message[1:])))
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
    names_conn: Connection | None,
    calls: list[dict],
    spans: list[dict],
    now: datetime,
    screen: tuple[str, ...] | None,
    names: dict[str, tuple[tuple[int, int], ...]],
    template_text: dict,
) -> tuple[list, list, list, dict, dict | None, dict]:
    """``Redactor.redact_columns`` of a chunk, knowing the ``names`` of the lines
    other processes read and the ``template_text`` the caller looked up; with
    ``screen`` patterns it also gives the residual-PII classes of the redacted
    text columns (found as they are written). Last: the
    names of the lines NER read here for the chunk, for the others. Over
    ``names_conn``, before reading its lines NER asks the caller for the names
    of those it knows by then (``_ask_for_names``)."""
    analyzer = redactor.pool.local
    redactor.template_text.update(template_text)
    learnt = analyzer.learn_names(names)
    mark = analyzer.names_mark()
    if names_conn is not None:
        redactor.line_exchange = lambda todo: _ask_for_names(analyzer, names_conn, todo)
    try:
        updates, span_updates, audit, stats, found = redactor.redact_columns(calls, spans, now, screen)
    finally:
        redactor.line_exchange = None
    if learnt:
        stats["ner_lines_received"] = stats.get("ner_lines_received", 0) + learnt
    return updates, span_updates, audit, stats, found, analyzer.names_since(mark)


def _ask_for_names(analyzer: TextAnalyzer, names_conn: Connection, todo: Sequence[Request]) -> None:
    """Between a chunk's collect pass and its analysis: learn from the caller the
    names of the lines NER would read here that it knows already (it read them, or
    learnt them from another worker, for a chunk of its own)."""
    wanted = analyzer.ner_lines(todo)
    if wanted:
        names_conn.send(("lines", wanted))
        kind, names = names_conn.recv()
        if kind != "names":
            raise WorkerFailed(f"expected the caller's 'names', got {kind!r}")
        analyzer.learn_names(names)


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


def row_cost(row: dict, text: str) -> int:
    value = row.get(text)
    return ROW_COST + (len(value) if isinstance(value, str) else 0)


class TraceQueue:
    """The rows of a batch grouped by trace, handed out in chunks of whole traces
    (call and span positions) from either end, from any thread: the caller takes
    from the front, the workers from the back.

    A user's traces are next to each other (ordered by the user id of each
    trace's first call, then as they came): they share the most text (their
    name, the turns they repeat), so they go mostly to one process, and NER
    reads those lines once. Guided: each take is ``1/(TAKE_DIVISOR * takers)``
    of the cost left, and at least ``1/MIN_CHUNK_DIVISOR`` of the whole (large
    chunks while there is a lot to do, small ones where the two ends meet, so that
    no process is left with a long chunk when the others are done). Which process
    redacts which chunk depends on timing, not on the rows; the output depends on
    neither."""

    def __init__(self, calls: Sequence[dict], spans: Sequence[dict], takers: int):
        groups: dict[Any, tuple[list[int], list[int]]] = {}
        costs: dict[Any, int] = {}
        users: dict[Any, str] = {}
        for i, row in enumerate(calls):
            trace = row.get("trace_id") or ""
            groups.setdefault(trace, ([], []))[0].append(i)
            costs[trace] = costs.get(trace, 0) + row_cost(row, "request_json")
            users.setdefault(trace, str(row.get("user_id") or ""))
        for i, row in enumerate(spans):
            trace = row.get("trace_id") or ""
            groups.setdefault(trace, ([], []))[1].append(i)
            costs[trace] = costs.get(trace, 0) + row_cost(row, "attributes_json") // 10
        order = sorted(range(len(groups)), key=lambda at, keys=list(groups): (users.get(keys[at], ""), at))
        traces = list(groups)
        self._groups = [groups[traces[at]] for at in order]
        self._costs = [costs[traces[at]] for at in order]
        self._left = sum(self._costs)
        self._least = max(1, self._left // MIN_CHUNK_DIVISOR)
        self._share = TAKE_DIVISOR * max(1, takers)
        self._front = 0
        self._back = len(self._groups)
        self._lock = threading.Lock()

    def take(self, front: bool = True) -> tuple[list[int], list[int]] | None:
        """The next chunk from the front (or the back): (call positions, span positions),
        or None when none is left."""
        with self._lock:
            if self._front >= self._back:
                return None
            want = max(self._least, self._left // self._share)
            calls: list[int] = []
            spans: list[int] = []
            got = 0
            while self._front < self._back and got < want:
                at = self._front if front else self._back - 1
                group_calls, group_spans = self._groups[at]
                calls += group_calls
                spans += group_spans
                got += self._costs[at]
                if front:
                    self._front += 1
                else:
                    self._back -= 1
            self._left -= got
            return sorted(calls), sorted(spans)

    def close(self) -> None:
        """Hand out nothing more (a process failed)."""
        with self._lock:
            self._front = self._back


def _exactly(sock: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:], size - got, socket.MSG_WAITALL)
        if n == 0:
            raise EOFError
        got += n
    return buffer


def _received(conn: Connection) -> Any:
    """``conn.recv()``, each part of the message read in one system call. ``recv``
    reads a socket's buffer at a time and takes the GIL back after each read: from
    a thread, while the caller's main thread redacts, every read waited for a
    switch interval (5 ms), and a worker sending a chunk's results stalled for
    seconds. Same framing as ``Connection.send_bytes``."""
    with socket.socket(fileno=os.dup(conn.fileno())) as sock:  # a duplicate: closing it leaves conn open
        (size,) = struct.unpack("!i", _exactly(sock, 4))
        if size == -1:
            (size,) = struct.unpack("!Q", _exactly(sock, 8))
        return pickle.loads(_exactly(sock, size))


class _Worker:
    """The calling side of one worker process."""

    def __init__(self, index: int, config: WorkerConfig, names_of: Callable[[list[str]], dict] | None = None):
        context = multiprocessing.get_context("spawn")
        self.index = index
        self.conn, child = context.Pipe()
        self.names_conn, names_child = context.Pipe()
        self.process = context.Process(
            target=_serve, args=(config, child, names_child), name=f"tracelake-redact-{index}"
        )
        self.process.daemon = True
        self.process.start()
        child.close()
        names_child.close()
        if names_of is not None:
            threading.Thread(
                target=self._answer, args=(names_of,), name=f"tracelake-redact-names-{index}", daemon=True
            ).start()

    def _answer(self, names_of: Callable[[list[str]], dict]) -> None:
        """Answers the worker's questions for names (``_ask_for_names``) until it exits."""
        try:
            while True:
                kind, lines = _received(self.names_conn)
                self.names_conn.send(("names", names_of(lines) if kind == "lines" else {}))
        except (EOFError, OSError):
            return

    def send(self, message: tuple) -> None:
        self.conn.send(message)

    def receive(self, kind: str | None = None) -> tuple:
        try:
            message = _received(self.conn)
        except (EOFError, ConnectionError):
            raise WorkerFailed(
                f"redaction worker {self.index} exited (exit code {self.process.exitcode}); "
                "check the machine's memory and the worker's log"
            ) from None
        if message[0] == "error":
            raise WorkerFailed(f"redaction worker {self.index} failed with {message[1]}")
        if kind is not None and message[0] != kind:
            raise WorkerFailed(f"redaction worker {self.index} sent {message[0]!r}, expected {kind!r}")
        return message

    def kill(self) -> None:
        """End a worker left mid-protocol (a failure while it redacted): a feeder thread
        may still be writing to its pipe, so no "stop" message can follow."""
        if self.process.is_alive():
            self.process.terminate()
        self.process.join()
        self.conn.close()
        self.names_conn.close()

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
        self.names_conn.close()


class _Feeder:
    """Two threads of the caller that keep one worker busy with chunks of the queue:
    one sends the next chunk while the worker redacts the one before (at most
    PREFETCH out), the other takes results back and puts them on ``back``
    (("chunk", call positions, span positions, payload), ("error", exception),
    and ("end",) last). Each chunk carries the names of the lines the caller
    has come to know since the worker's previous one."""

    def __init__(
        self,
        worker: _Worker,
        chunks: TraceQueue,
        back: queue.SimpleQueue,
        calls: Sequence[dict],
        spans: Sequence[dict],
        now: datetime,
        screen: tuple[str, ...] | None,
        analyzer: TextAnalyzer,
        template_text: dict,
    ):
        self.worker, self.chunks, self.back = worker, chunks, back
        self.rows = (calls, spans)
        self.now, self.screen, self.analyzer, self.template_text = now, screen, analyzer, template_text
        self.slots = threading.Semaphore(PREFETCH)
        self.sent: queue.SimpleQueue = queue.SimpleQueue()
        for target in (self._send, self._receive):
            threading.Thread(target=target, name=f"tracelake-redact-feed-{worker.index}", daemon=True).start()

    def _send(self) -> None:
        calls, spans = self.rows
        told = 0
        try:
            while True:
                self.slots.acquire()
                chunk = self.chunks.take(front=False)
                if chunk is None:
                    break
                call_at, span_at = chunk
                # only what redaction reads goes through the pipe: pickling whole rows cost more than it saved
                shard_calls = [_columns(calls[i], CALL_COLUMNS) for i in call_at]
                shard_spans = [_columns(spans[i], SPAN_COLUMNS) for i in span_at]
                mark = self.analyzer.names_mark()
                names = self.analyzer.names_since(told)
                told = mark
                message = ("redact", shard_calls, shard_spans, self.now, self.screen, names, self.template_text)
                self.worker.send(message)
                self.sent.put(chunk)
        except BaseException as e:
            self.chunks.close()
            failed = WorkerFailed(f"sending rows to redaction worker {self.worker.index} failed with {_where(e)}")
            self.back.put(("error", failed))
        finally:
            self.sent.put(None)

    def _receive(self) -> None:
        try:
            while (chunk := self.sent.get()) is not None:
                _, payload = self.worker.receive("done")
                self.slots.release()
                self.back.put(("chunk", *chunk, payload))
        except BaseException as e:
            self.chunks.close()
            self.back.put(("error", e if isinstance(e, WorkerFailed) else WorkerFailed(_where(e))))
        finally:
            self.back.put(("end",))


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

    def start_workers(self) -> list[_Worker]:
        """Start now the worker processes ``redact_shards`` will use (the caller is the
        other shard), so that their start and NER model loading overlap the caller's work."""
        return self._started(self.workers - 1)

    def _started(self, count: int | None = None) -> list[_Worker]:
        """``count`` worker processes (default ``workers``), started now if fewer are up."""
        count = self.workers if count is None else count
        if len(self._processes) < count:
            if self.config is None:
                raise RuntimeError("a worker pool needs the redactor's configuration")
            self._processes += [
                _Worker(i, self.config, self._names_of_lines) for i in range(len(self._processes), count)
            ]
        return self._processes[:count]

    def _names_of_lines(self, lines: list[str]) -> dict:
        """For a worker's question (from a thread): the names this process knows of these lines."""
        return self._local.names_of_lines(lines) if self._local is not None else {}

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
        here: Callable[[list[dict], list[dict]], tuple],
        template_text: dict,
    ) -> Iterator[tuple[list[int], list[int], tuple[list, list, list, dict, dict | None]]]:
        """The rows in chunks of whole traces taken from one queue by the caller and
        ``workers - 1`` processes until it is empty: (call positions, span positions,
        ``Redactor.redact_columns`` of those rows) per chunk, as each is done. The
        caller redacts its chunks by ``here(calls, spans)``, and between them yields
        the workers' chunks that came back, so that they are finished while the
        workers still redact. ``template_text``: ``Redactor.template_text``, sent with each chunk."""
        workers = self.start_workers()
        chunks = TraceQueue(calls, spans, len(workers) + 1)
        analyzer = self.local
        back: queue.SimpleQueue = queue.SimpleQueue()
        feeders = [
            _Feeder(worker, chunks, back, calls, spans, now, screen, analyzer, template_text) for worker in workers
        ]
        running = len(feeders)
        finished = False

        def came_back(message: tuple) -> Iterator[tuple]:
            nonlocal running
            if message[0] == "end":
                running -= 1
            elif message[0] == "error":
                raise message[1]
            else:
                _, call_at, span_at, (*payload, names) = message
                learnt = analyzer.learn_names(names)
                if learnt:  # counted with the chunk that brought them
                    payload[3]["ner_lines_received"] = payload[3].get("ner_lines_received", 0) + learnt
                yield call_at, span_at, tuple(payload)

        try:
            while (chunk := chunks.take()) is not None:
                while not back.empty():
                    yield from came_back(back.get())
                call_at, span_at = chunk
                yield call_at, span_at, here([calls[i] for i in call_at], [spans[i] for i in span_at])
            while running:
                yield from came_back(back.get())
            finished = True
        finally:
            if not finished:  # a failure, here or in a worker: the workers are mid-protocol
                chunks.close()
                self._kill()

    def _kill(self) -> None:
        for worker in self._processes:
            worker.kill()
        self._processes = []

    def close(self) -> None:
        for worker in self._processes:
            worker.stop()
        self._processes = []
