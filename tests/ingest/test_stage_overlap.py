"""What the ingest stage overlaps with its redaction workers (bench/ingest.py,
pipelines/formats/README.md#speed): the workers start as soon as the parsed
rows show the pool will redact them, the caller's own work runs while they
redact (``plan_day(redacting=)``), they stop as soon as redaction is done
(``redacted=``), and the quality checks' Great Expectations context can be
built meanwhile, once whoever asks for it first."""

from __future__ import annotations

import functools
import threading
import time
from datetime import UTC, date, datetime
from typing import Any

from assets.ingest import _start_workers_early
from pipelines.demo import generate
from pipelines.ingest import quality
from pipelines.ingest.objects import SourceObject
from pipelines.ingest.plan import plan_day
from pipelines.redact.keys import KeyRing
from pipelines.redact.redactor import Redactor
from pipelines.redact.residual import patterns_for_mode
from pipelines.resources.object_store import ObjectStore

DAY = date(2026, 11, 20)
NOW = datetime(2026, 11, 21, 3, tzinfo=UTC)


class _Recorded:
    """A redactor that notes in ``events`` when rows reach it."""

    def __init__(self, redactor: Redactor, events: list[str]):
        self.redactor, self.events, self.mode = redactor, events, redactor.mode

    def redact_rows(self, calls, spans, **options: Any):
        self.events.append(f"redact {len(calls)} calls")
        return self.redactor.redact_rows(calls, spans, **options)


def _plan(store: ObjectStore, **options: Any):
    def read_objects(todo):
        for i in todo:
            yield SourceObject(i.key, store.uri_for(i.key), i.etag, i.size, i.last_modified, store.read(i.key))

    return plan_day(
        store.list_day(DAY), {}, read_objects, lambda ids, days: [], day=DAY, run_id="r", now=NOW, **options
    )


def test_the_callers_hooks_run_once_around_redaction(tmp_path):
    generate(str(tmp_path / "source"), calls=60, days=1, seed=5, end=DAY)
    store = ObjectStore(uri=str(tmp_path / "source"))
    events: list[str] = []
    with Redactor(
        mode="placeholder", keys=KeyRing.from_secrets(hash_secret="test-hash-secret-0123456789abcdef"), ner=False
    ) as redactor:
        plan = _plan(
            store,
            redactor=_Recorded(redactor, events),
            policy=redactor.policy,
            patterns=patterns_for_mode("placeholder"),
            redacting=lambda: events.append("caller's work"),
            redacted=lambda: events.append("redactor done"),
        )
    calls = len(plan.batch.calls)
    assert calls > 0 and events == ["caller's work", f"redact {calls} calls", "redactor done"]

    # no redactor, nothing to overlap: the caller's work is not started
    unredacted: list[str] = []
    _plan(store, redacting=lambda: unredacted.append("caller's work"), redacted=lambda: unredacted.append("done"))
    assert unredacted == []


class _Pool:
    def __init__(self) -> None:
        self.starts = 0

    @property
    def started(self) -> bool:
        return self.starts > 0

    def start(self) -> None:
        self.starts += 1


class _PooledRedactor:
    def __init__(self, min_rows: int):
        self.pool, self.min_rows = _Pool(), min_rows

    def in_workers(self, rows: int) -> bool:
        return rows >= self.min_rows


def test_workers_start_once_when_the_rows_parsed_so_far_reach_the_pools_threshold():
    redactor = _PooledRedactor(min_rows=1_000)
    for rows in (10, 400, 999):  # a day this small is redacted in the calling process
        _start_workers_early(redactor, rows)
    assert redactor.pool.starts == 0
    for rows in (1_000, 1_500, 40_000):
        _start_workers_early(redactor, rows)
    assert redactor.pool.starts == 1


def test_the_gx_context_is_built_once_when_prepared_in_background(monkeypatch):
    built = []

    @functools.lru_cache(maxsize=1)
    def counted():
        built.append(threading.current_thread().name)
        time.sleep(0.2)  # a build takes seconds: the other caller asks while it runs
        return object()

    monkeypatch.setattr(quality, "_gx_source", counted)
    background = quality.prepare_in_background()
    first = quality.gx_source()
    background.join()
    assert quality.gx_source() is first
    assert len(built) == 1, built
