"""Spreading redaction over processes, one analyzer per worker.

presidio and spaCy hold the GIL, so threads do not help. Each worker process
builds its own redactor (and so its own analyzer) once, then either redacts
whole traces (``redact_shards``: rows are split by trace id, so every trace's
placeholders are still numbered in one place and the output is the same as
in one process) or analyzes batches of texts (``analyze``). Workers are
spawned, not forked: the caller may be a Dagster run with threads, and a
fork taken while another thread holds a lock can hang. Small jobs stay in
the calling process, where starting workers would cost more than it saves.
"""

from __future__ import annotations

import multiprocessing
import time
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pipelines.redact.analyzer import DetectorSettings, Hit, Request, TextAnalyzer
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

# below these, one process is faster than starting workers (about 2 s each)
MIN_POOL_CHARS = 2_000_000
MIN_POOL_ROWS = 10_000
BATCH_CHARS = 200_000
BATCH_TEXTS = 256


@dataclass(frozen=True)
class WorkerConfig:
    policy: Policy
    mode: str
    keys: KeyRing
    ner: bool


_worker: Redactor | None = None


def _start_worker(config: WorkerConfig) -> None:
    from pipelines.redact.redactor import Redactor

    global _worker
    _worker = Redactor(config.policy, config.mode, config.keys, workers=1, ner=config.ner)
    _worker.pool.start_analyzer()  # the NER model loads while the parent still prepares the rows


def _ready() -> None:
    """A task that only makes the pool start a worker."""


def _analyze_batch(requests: Sequence[Request]) -> list[list[Hit]]:
    assert _worker is not None, "worker started without a redactor"
    return _worker.pool.local.analyze_many(requests)


def _redact_shard(
    shard: tuple[list[dict], list[dict], datetime, tuple[str, ...] | None],
) -> tuple[list, list, list, dict, dict | None]:
    """``Redactor.redact_columns`` of a shard; with ``screen`` patterns also the
    residual-PII classes of its redacted text columns (the rows are here already)."""
    assert _worker is not None, "worker started without a redactor"
    calls, spans, now, screen = shard
    call_updates, span_updates, audit, stats = _worker.redact_columns(calls, spans, now)
    found = None
    if screen is not None:
        started = time.process_time()
        found = _worker.screen_columns(
            [{**row, **update} for row, update in zip(calls, call_updates, strict=True)],
            [{**row, **update} for row, update in zip(spans, span_updates, strict=True)],
            screen,
        )
        stats["screen_cpu_ms"] = round((time.process_time() - started) * 1000)
    return call_updates, span_updates, audit, stats, found


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
    """Stable across processes and runs (``hash()`` of a str is not)."""
    return zlib.crc32(str(trace_id or "").encode()) % shards


class AnalyzerPool:
    def __init__(self, settings: DetectorSettings, workers: int = 1, config: WorkerConfig | None = None):
        self.settings = settings
        self.workers = max(1, workers)
        self.config = config
        self._local: TextAnalyzer | None = None
        self._executor: ProcessPoolExecutor | None = None

    @property
    def local(self) -> TextAnalyzer:
        if self._local is None:
            self._local = TextAnalyzer(self.settings)
        return self._local

    def start_analyzer(self) -> TextAnalyzer:
        return self.local

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            if self.config is None:
                raise RuntimeError("a worker pool needs the redactor's configuration")
            self._executor = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(self.config,),
            )
        return self._executor

    def ner_stats(self) -> dict[str, int]:
        """NER's counters in this process so far (texts analyzed in workers are not in them)."""
        return self._local.ner_stats() if self._local is not None else {}

    def parallel_rows(self, rows: int) -> bool:
        return self.workers > 1 and self.config is not None and rows >= MIN_POOL_ROWS

    def analyze(self, requests: Sequence[Request]) -> list[list[Hit]]:
        chars = sum(len(r.text) for r in requests)
        results: list[list[Hit]] = []
        if self.workers == 1 or self.config is None or chars < MIN_POOL_CHARS:
            for batch in batches(requests):
                results += self.local.analyze_many(batch)
            return results
        for batch_result in self._pool().map(_analyze_batch, batches(requests)):
            results += batch_result
        return results

    def warm_up(self) -> None:
        """Start every worker now (spawning one and loading its model takes seconds):
        the caller's own work until it submits overlaps with it."""
        pool = self._pool()
        for _ in range(self.workers):
            pool.submit(_ready)

    def redact_shards(
        self, calls: Sequence[dict], spans: Sequence[dict], now: datetime, screen: tuple[str, ...] | None = None
    ) -> Iterator[tuple[list[int], list[int], tuple[list, list, list, dict, dict | None]]]:
        """Rows split by trace id over the workers: (call positions, span positions,
        ``_redact_shard`` of those rows) per shard, as each shard is done."""
        self.warm_up()
        n = self.workers
        call_at: list[list[int]] = [[] for _ in range(n)]
        span_at: list[list[int]] = [[] for _ in range(n)]
        for i, row in enumerate(calls):
            call_at[shard_of(row.get("trace_id"), n)].append(i)
        for i, row in enumerate(spans):
            span_at[shard_of(row.get("trace_id"), n)].append(i)
        # only what redaction reads goes through the pipe: pickling whole rows cost more than it saved
        pool = self._pool()
        futures = {}
        for c, s in zip(call_at, span_at, strict=True):
            shard = ([_columns(calls[i], CALL_COLUMNS) for i in c], [_columns(spans[i], SPAN_COLUMNS) for i in s])
            futures[pool.submit(_redact_shard, (*shard, now, screen))] = (c, s)
        for future in as_completed(futures):
            c, s = futures[future]
            yield c, s, future.result()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(cancel_futures=True)
            self._executor = None
