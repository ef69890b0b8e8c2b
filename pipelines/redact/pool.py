"""Spreading analysis over processes, one analyzer per worker.

presidio and spaCy hold the GIL, so threads do not help; each worker process
builds its own ``TextAnalyzer`` once and is fed batches of texts. Workers are
spawned, not forked: the caller may be a Dagster run with threads, and a
fork taken while another thread holds a lock can hang. Small jobs stay in
the calling process, where starting workers would cost more than it saves.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor

from pipelines.redact.analyzer import DetectorSettings, Hit, Request, TextAnalyzer

# below this many characters to analyze, one process is faster than starting workers
MIN_POOL_CHARS = 2_000_000
BATCH_CHARS = 200_000
BATCH_TEXTS = 256

_worker_analyzer: TextAnalyzer | None = None


def _start_worker(settings: DetectorSettings) -> None:
    global _worker_analyzer
    _worker_analyzer = TextAnalyzer(settings)


def _analyze_batch(requests: Sequence[Request]) -> list[list[Hit]]:
    assert _worker_analyzer is not None, "worker started without an analyzer"
    return _worker_analyzer.analyze_many(requests)


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


class AnalyzerPool:
    def __init__(self, settings: DetectorSettings, workers: int = 1):
        self.settings = settings
        self.workers = max(1, workers)
        self._local: TextAnalyzer | None = None
        self._executor: ProcessPoolExecutor | None = None

    @property
    def local(self) -> TextAnalyzer:
        if self._local is None:
            self._local = TextAnalyzer(self.settings)
        return self._local

    def analyze(self, requests: Sequence[Request]) -> list[list[Hit]]:
        chars = sum(len(r.text) for r in requests)
        if self.workers == 1 or chars < MIN_POOL_CHARS:
            results: list[list[Hit]] = []
            for batch in batches(requests):
                results += self.local.analyze_many(batch)
            return results
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(self.settings,),
            )
        results = []
        for batch_result in self._executor.map(_analyze_batch, batches(requests)):
            results += batch_result
        return results

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(cancel_futures=True)
            self._executor = None
