"""Redaction spread over worker processes: the redactor's one fast path.

presidio and spaCy hold the GIL, so threads do not help: each worker is a process
(spawned, not forked: the caller may be a Dagster run with threads) that builds
its own redactor and NER model once. A batch is cut into chunks of whole traces
(a trace's placeholders are numbered in one place), a user's traces next to each
other (they share the most text, which a worker's caches then read once); the
workers take the chunks in turn and the caller finishes each one's rows as it
comes back. The output is that of one process (``tests/redact/test_pool.py``).
"""

from __future__ import annotations

import gc
import multiprocessing
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from pipelines.redact.keys import KeyRing
from pipelines.redact.policy import Policy
from pipelines.redact.row_fields import CALL_FIELDS, SPAN_FIELDS

# What a worker needs of each row: the text-bearing columns, the hashes, and
# what orders a trace and fills an audit row (pickling whole rows costs more).
_ROW_KEYS = ("trace_id", "span_id", "occurred_at", "occurred_date", "flags")
CALL_COLUMNS = (
    *_ROW_KEYS, "call_id", "rendered_request_sha256", "request_sha256", "request_hash_matches", "block_hashes",
    "template_id", "template_version", *CALL_FIELDS,
)  # fmt: skip
SPAN_COLUMNS = (*_ROW_KEYS, "span_key", "call_id", *SPAN_FIELDS)
# below this many rows one process is faster than starting workers (about 2 s each)
MIN_POOL_ROWS = 10_000
# chunks per batch: the last one to finish is the tail all others wait for
CHUNKS = 40
# what a row costs to redact, roughly: its JSON text and a fixed part
ROW_COST = 1_000


@dataclass(frozen=True)
class WorkerConfig:
    policy: Policy
    mode: str
    keys: KeyRing
    ner: bool


class WorkerFailed(RuntimeError):
    """A worker failed. The message names the exception class and where it was
    raised (file and line), never the text being redacted."""


_redactor: Any = None  # a worker's own redactor


def _start(make: Callable[[WorkerConfig], Any], config: WorkerConfig) -> None:
    global _redactor
    gc.set_threshold(0)  # a worker's life is one batch's objects: no automatic collection (``collector.gc_paused``)
    _redactor = make(config)


def _run(method: str, template_text: dict, operator_lines: frozenset, *args: Any) -> Any:
    """In a worker: ``getattr(redactor, method)(*args)`` knowing the templates the caller looked up
    and the batch's operator lines."""
    try:
        _redactor.template_text.update(template_text)
        _redactor.operator_lines = operator_lines
        return getattr(_redactor, method)(*args)
    except Exception as e:  # its message may quote the text: send where, not what
        frames = traceback.extract_tb(e.__traceback__)
        at = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        raise WorkerFailed(f"a redaction worker failed with {type(e).__name__}{at}") from None


def _ready() -> None:
    return None


def trace_chunks(calls: Sequence[dict], spans: Sequence[dict], chunks: int | None = None) -> list[tuple[list, list]]:
    """(call positions, span positions) of ``chunks`` (default ``CHUNKS``) runs of whole traces
    of about equal cost, a user's traces together (ordered by the user of each trace's first call)."""
    chunks = chunks or CHUNKS
    groups: dict[Any, tuple[list[int], list[int]]] = {}
    costs: dict[Any, int] = {}
    users: dict[Any, str] = {}
    for table, rows, text, share in ((0, calls, "request_json", 1), (1, spans, "attributes_json", 10)):
        for at, row in enumerate(rows):
            trace = row.get("trace_id") or ""
            groups.setdefault(trace, ([], []))[table].append(at)
            value = row.get(text)
            costs[trace] = costs.get(trace, 0) + (ROW_COST + (len(value) if isinstance(value, str) else 0)) // share
            if table == 0:
                users.setdefault(trace, str(row.get("user_id") or ""))
    order = sorted(groups, key=lambda trace: users.get(trace, ""))
    each = max(1, sum(costs.values()) // chunks)
    out: list[tuple[list, list]] = []
    got = each
    for trace in order:
        if got >= each:
            out.append(([], []))
            got = 0
        out[-1][0].extend(groups[trace][0])
        out[-1][1].extend(groups[trace][1])
        got += costs[trace]
    return [(sorted(c), sorted(s)) for c, s in out]


class WorkerPool:
    """``workers`` processes, started on first use and kept for the redactor's life.
    ``make(config)`` builds a worker's redactor (a module-level function: it is pickled)."""

    def __init__(self, workers: int, config: WorkerConfig, make: Callable[[WorkerConfig], Any]):
        self.workers = workers
        self.config = config
        self.make = make
        self.min_rows = MIN_POOL_ROWS
        self._executor: ProcessPoolExecutor | None = None

    @property
    def started(self) -> bool:
        return self._executor is not None

    def start(self) -> None:
        """Start the processes now (they load their NER models while the caller works on)."""
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                self.workers,
                multiprocessing.get_context("spawn"),
                initializer=_start,
                initargs=(self.make, self.config),
            )
            self._executor.submit(_ready)

    def redact_rows(
        self, calls: Sequence[dict], spans: Sequence[dict], now: Any, template_text: dict, operator_lines: frozenset
    ) -> Iterator[tuple[list[int], list[int], Any]]:
        """(call positions, span positions, ``Redactor.redact_columns`` of those rows) per
        chunk of whole traces, as each comes back."""
        chunks = trace_chunks(calls, spans)
        tasks = [
            ([_columns(calls[i], CALL_COLUMNS) for i in c], [_columns(spans[i], SPAN_COLUMNS) for i in s], now)
            for c, s in chunks
        ]
        for at, result in self._map("redact_columns", template_text, operator_lines, tasks):
            yield *chunks[at], result

    def redact_documents(self, groups: Sequence[list[Any]]) -> Iterator[tuple[int, list[Any]]]:
        """(group position, ``Redactor.redact_documents`` of the group) as each comes back."""
        yield from self._map("redact_documents", {}, frozenset(), [(group,) for group in groups])

    def _map(
        self, method: str, template_text: dict, operator_lines: frozenset, tasks: list[tuple]
    ) -> Iterator[tuple[Any, Any]]:
        self.start()
        assert self._executor is not None
        futures = {
            self._executor.submit(_run, method, template_text, operator_lines, *args): at
            for at, args in enumerate(tasks)
        }
        finished = False
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
            finished = True
        finally:
            if not finished:  # a worker failed: nothing more of this batch, and fresh workers for the next
                for future in futures:
                    future.cancel()
                self.close()

    def close(self) -> None:
        """Stop the workers without waiting for them to free their state."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def _columns(row: dict, names: tuple[str, ...]) -> dict:
    return {name: row.get(name) for name in names}
