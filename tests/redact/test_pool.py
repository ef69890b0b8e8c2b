"""Worker processes change the speed, not the result."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from pipelines.redact import pool
from pipelines.redact.redactor import Redactor
from tests.redact.conftest import KEYS, rows_of
from tests.redact.test_ner_scope import AUTHOR, BRAND, template_store, templated_call, untemplated_call

NOW = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def single(corpus, corpus_rows):
    with Redactor(mode="placeholder", keys=KEYS, workers=1, ner=False) as one:
        return one.redact_rows(*corpus_rows, now=NOW), one.redact_documents(corpus.documents)


@pytest.mark.parametrize("chunks", [1, 3, 10_000], ids=["one-chunk", "three-chunks", "a-trace-a-chunk"])
def test_workers_give_the_rows_documents_and_audit_of_one_process(corpus, corpus_rows, single, monkeypatch, chunks):
    """Chunks of every size, taken by whichever worker is free: the rows, audit and
    replacements of one process; documents too (grouped by trace)."""
    calls, spans = corpus_rows
    monkeypatch.setattr(pool, "MIN_POOL_ROWS", 10)
    monkeypatch.setattr(pool, "CHUNKS", chunks)
    with Redactor(mode="placeholder", keys=KEYS, workers=2, ner=False) as two:
        assert two.in_workers(len(calls) + len(spans)) and not two.pool.started
        two.pool.start()  # as the ingest asset does while it still parses
        result = two.redact_rows(calls, spans, now=NOW)
        documents = two.redact_documents(corpus.documents)
        assert two.pool.started
    rows, docs = single
    assert (result.calls, result.spans, result.audit) == (rows.calls, rows.spans, rows.audit)
    assert result.stats["replacements"] == rows.stats["replacements"]
    assert documents == docs


def test_chunks_hold_every_trace_once_whole_and_about_the_same_cost():
    calls = [{"trace_id": f"t{i % 50}", "request_json": "x" * (i % 7) * 100} for i in range(400)]
    spans = [{"trace_id": f"t{i % 60}", "attributes_json": "{}"} for i in range(300)]  # ten traces without calls
    chunks = pool.trace_chunks(calls, spans, 8)
    assert sorted(i for c, _ in chunks for i in c) == list(range(len(calls)))
    assert sorted(i for _, s in chunks for i in s) == list(range(len(spans)))
    traces = [{calls[i]["trace_id"] for i in c} | {spans[i]["trace_id"] for i in s} for c, s in chunks]
    assert sum(map(len, traces)) == len(set().union(*traces)) == 60  # each trace in one chunk
    assert 6 <= len(chunks) <= 9


def test_the_workers_read_names_and_keep_a_templates_names_as_one_process_does(monkeypatch):
    """NER in the workers: the templates are looked up by the caller and sent with each
    chunk, so a worker keeps the operator's names of a template the store has and reads
    the whole prompt of one it does not have; untemplated prompts lose their names."""
    monkeypatch.setattr(pool, "MIN_POOL_ROWS", 10)
    monkeypatch.setattr(pool, "CHUNKS", 1_000)
    system = f"Você é o assistente {BRAND}. Seu supervisor é {AUTHOR}."
    documents = [untemplated_call(n) for n in range(12)]
    for n in range(24):
        doc = templated_call("operator" if n % 2 else "deleted", system, {"idioma": "pt"}, [], f"Oi, pedido {n}")
        documents.append({**doc, "trace_id": f"templated-{n}"})
    calls, spans = rows_of(documents)
    with Redactor(mode="placeholder", keys=KEYS, workers=1, ner=True, templates=template_store) as one:
        single = one.redact_rows(calls, spans, now=NOW)
    with Redactor(mode="placeholder", keys=KEYS, workers=2, ner=True, templates=template_store) as two:
        sharded = two.redact_rows(calls, spans, now=NOW)
        assert two.pool.started
    assert (sharded.calls, sharded.spans, sharded.audit) == (single.calls, single.spans, single.audit)
    kept = {(AUTHOR in call["system_text"], call["template_version"]) for call in sharded.calls}
    assert kept == {(True, "operator"), (False, "deleted"), (False, None)}


class Exploding(str):
    """A text whose handling fails with the text in the message (as a library's error may)."""

    def strip(self, *args):
        raise ValueError(f"cannot read {str(self)}")


def test_a_failing_worker_fails_the_batch_without_quoting_it_and_the_next_batch_runs(corpus_rows, monkeypatch):
    calls, spans = corpus_rows
    monkeypatch.setattr(pool, "MIN_POOL_ROWS", 10)
    broken = copy.deepcopy(calls)
    broken[7]["output_text"] = Exploding("joana.prado@provedor.com.br")
    with Redactor(mode="placeholder", keys=KEYS, workers=2, ner=False) as two:
        with pytest.raises(pool.WorkerFailed) as failed:
            two.redact_rows(broken, spans, now=NOW)
        assert "ValueError" in str(failed.value)
        assert "joana" not in str(failed.value) and "joana" not in repr(failed.value.__cause__)
        assert not two.pool.started  # the workers of the failed batch were stopped
        again = two.redact_rows(calls, spans, now=NOW)
    with Redactor(mode="placeholder", keys=KEYS, workers=1, ner=False) as one:
        assert again.calls == one.redact_rows(calls, spans, now=NOW).calls
