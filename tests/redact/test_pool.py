"""Worker processes change the speed, not the result."""

from __future__ import annotations

from datetime import UTC, datetime

from pipelines.redact import pool
from pipelines.redact.policy import EntityRule, load_policy
from pipelines.redact.redactor import Redactor
from pipelines.redact.residual import PATTERNS, row_residuals
from pipelines.redact.screen import screen_rows
from tests.redact.conftest import KEYS, rows_of
from tests.redact.test_ner_scope import AUTHOR, untemplated_call

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
        two.pool.start_workers()  # as the ingest asset does while it still parses
        early = list(two.pool._processes)
        sharded = two.redact_rows(calls, spans, now=NOW)
        assert len(early) == 1 and two.pool._processes == early  # the ones started early, no other
        # documents go the other way: walked here, analyzed by the workers
        sharded_docs = two.redact_documents(corpus.documents)
        assert two.pool.started
    assert sharded.calls == single.calls
    assert sharded.spans == single.spans
    assert sharded.audit == single.audit
    assert sharded_docs == single_docs
    assert {pool.shard_of(c["trace_id"], 2) for c in calls} == {0, 1}  # both workers had traces


def test_the_screen_run_by_the_redactor_finds_what_scanning_its_rows_finds(corpus_rows, monkeypatch):
    """Screened where the rows are made (text columns in the workers, the rest
    here): the same classes per row as the scan of the returned rows."""
    calls, spans = corpus_rows
    monkeypatch.setattr(pool, "MIN_POOL_ROWS", 10)
    base = load_policy()
    # emails and CPFs kept: rows the screen must hold back
    policy = base.model_copy(
        update={
            "entities": {
                **base.entities,
                "EMAIL_ADDRESS": EntityRule(operator="keep"),
                "BR_CPF": EntityRule(operator="keep"),
            }
        }
    )
    for workers in (1, 2):
        with Redactor(policy, mode="placeholder", keys=KEYS, workers=workers, ner=False) as redactor:
            result = redactor.redact_rows(calls, spans, now=NOW, screen=PATTERNS)
            assert redactor.pool.started == (workers == 2)
        assert result.screened == PATTERNS
        scanned = {
            table: row_residuals(rows, table, policy)
            for table, rows in (("calls", result.calls), ("spans", result.spans))
        }
        assert result.residuals == scanned, workers
        assert sum(map(bool, scanned["calls"])) > len(calls) // 4
        assert {c for row in scanned["calls"] for c in row} >= {"email", "cpf"}
        screened = screen_rows(result.calls, result.spans, policy, keys_by_uri={}, run_id="r", now=NOW, found=result)
        assert len(screened.calls) == sum(not f for f in scanned["calls"])


def test_a_line_both_workers_need_is_read_by_ner_once_and_its_names_reach_the_other(monkeypatch):
    """The shared system prompt lines of traces split over two workers: NER reads
    each in one of them, the other gets its names, and the rows, audit and screen
    are those of one process."""
    monkeypatch.setattr(pool, "MIN_POOL_ROWS", 10)
    calls, spans = rows_of([untemplated_call(n) for n in range(30)])
    with Redactor(mode="placeholder", keys=KEYS, workers=1, ner=True) as one:
        single = one.redact_rows(calls, spans, now=NOW, screen=PATTERNS)
    with Redactor(mode="placeholder", keys=KEYS, workers=2, ner=True) as two:
        sharded = two.redact_rows(calls, spans, now=NOW, screen=PATTERNS)
        assert two.pool.started
        assert len(two.pool._processes) == 1  # the caller redacted shard 0 itself
    assert {pool.shard_of(c["trace_id"], 2) for c in calls} == {0, 1}
    assert (sharded.calls, sharded.spans, sharded.audit) == (single.calls, single.spans, single.audit)
    assert sharded.residuals == single.residuals
    assert all(AUTHOR not in call["system_text"] for call in sharded.calls)
    # lines both shards hold were read once, in one worker, and learnt by the other
    assert sharded.stats["ner_lines"] == single.stats["ner_lines"]
    assert sharded.stats["ner_lines_received"] >= 4


def test_each_line_wanted_by_several_workers_has_one_owner():
    elsewhere, shared = pool.owners([["a", "b", "c"], ["b", "c", "d"], ["c"]])
    assert sorted(shared[0] + shared[1] + shared[2]) == ["b", "c"]  # "a" and "d" stay with their only reader
    for line, wanted_by in (("b", {0, 1}), ("c", {0, 1, 2})):
        owner = next(i for i in range(3) if line in shared[i])
        assert owner in wanted_by
        assert {i for i in range(3) if line in elsewhere[i]} == wanted_by - {owner}
