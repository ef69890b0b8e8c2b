"""Worker processes change the speed, not the result."""

from __future__ import annotations

from datetime import UTC, datetime

from pipelines.redact import pool
from pipelines.redact.redactor import Redactor
from tests.redact.conftest import KEYS

NOW = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)


def test_two_workers_give_the_same_rows_documents_and_audit(corpus, corpus_rows, redacted_rows, monkeypatch):
    calls, spans = corpus_rows
    monkeypatch.setattr(pool, "MIN_POOL_ROWS", 10)
    monkeypatch.setattr(pool, "MIN_POOL_CHARS", 1_000)
    with Redactor(mode="placeholder", keys=KEYS, workers=1, ner=False) as one:
        single = one.redact_rows(calls, spans, now=NOW)
        single_docs = one.redact_documents(corpus.documents)
    with Redactor(mode="placeholder", keys=KEYS, workers=2, ner=False) as two:
        assert two.pool.parallel_rows(len(calls) + len(spans))
        sharded = two.redact_rows(calls, spans, now=NOW)
        # documents go the other way: walked here, analyzed by the workers
        sharded_docs = two.redact_documents(corpus.documents)
        assert two.pool._executor is not None
    assert sharded.calls == single.calls
    assert sharded.spans == single.spans
    assert sharded.audit == single.audit
    assert sharded_docs == single_docs
    assert {pool.shard_of(c["trace_id"], 2) for c in calls} == {0, 1}  # both workers had traces
