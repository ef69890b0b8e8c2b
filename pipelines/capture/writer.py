"""A bounded background writer: the application thread only enqueues.

When the queue is full a record is dropped (and counted) rather than making
the application wait; a failed write is logged with the error's type only,
never the record (it holds prompts and user data).
"""

from __future__ import annotations

import logging
import queue
import threading

from pipelines.capture.sinks import Sink

log = logging.getLogger("tracelake.capture")
_STOP = object()


class BackgroundWriter:
    def __init__(self, sink: Sink, max_queue: int = 1000):
        self.sink = sink
        self.queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self.written = 0
        self.dropped = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="tracelake-capture", daemon=True)
        self._thread.start()

    def submit(self, key: str, data: bytes) -> bool:
        """Enqueue without blocking. False when the record was dropped."""
        try:
            self.queue.put_nowait((key, data))
            return True
        except queue.Full:
            self.dropped += 1
            log.warning("tracelake capture: queue full, record dropped (%d dropped so far)", self.dropped)
            return False

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            try:
                if item is _STOP:
                    return
                key, data = item
                self.sink.write(key, data)
                self.written += 1
            except Exception as e:  # storage must never take the application down
                self.failed += 1
                log.warning("tracelake capture: write failed (%s)", type(e).__name__)
            finally:
                self.queue.task_done()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued record is written or failed. False on timeout."""
        done = threading.Event()

        def wait() -> None:
            self.queue.join()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        return done.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        self.flush(timeout)
        try:
            self.queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)
