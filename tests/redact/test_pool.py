"""Worker processes change the speed, not the result."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipelines.redact import pool
from pipelines.redact.policy import EntityRule, load_policy
from pipelines.redact.redactor import Redactor
from pipelines.redact.residual import PATTERNS, row_residuals
from pipelines.redact.screen import screen_rows
from tests.redact.conftest import KEYS, rows_of
from tests.redact.test_ner_scope import AUTHOR, BRAND, template_store, templated_call, untemplated_call

NOW = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)


def test_two_workers_give_the_same_rows_documents_and_audit(corpus, corpus_rows, redacted_rows, monkeypatch):
    calls, spans = corpus_rows
    monkeypatch.setattr(pool, "MIN_POOL_ROWS", 10)
    monkeypatch.setattr(pool, "MIN_POOL_CHARS", 1_000)
    with Redactor(mode="placeholder", keys=KEYS, workers=1, ner=False) as one:
        single = one.redact_rows(calls, spans, now=NOW)
        single_docs = one.redact_documents(corpus.documents)
    sent = _count_sent(monkeypatch)
    with Redactor(mode="placeholder", keys=KEYS, workers=2, ner=False) as two:
        assert two.pool.parallel_rows(len(calls) + len(spans))
        two.pool.start_workers()  # as the ingest asset does while it still parses
        early = list(two.pool._processes)
        sharded = two.redact_rows(calls, spans, now=NOW)
        assert len(early) == 1 and two.pool._processes == early  # the ones started early, no other
        assert 0 < sent["calls"] < len(calls)  # the worker had chunks, and so had the caller
        # documents go the other way: walked here, analyzed by the workers
        sharded_docs = two.redact_documents(corpus.documents)
        assert two.pool.started
    assert sharded.calls == single.calls
    assert sharded.spans == single.spans
    assert sharded.audit == single.audit
    assert sharded_docs == single_docs


def _count_sent(monkeypatch) -> dict[str, int]:
    """Counts the chunks and call rows the caller sends to its workers."""
    sent = {"chunks": 0, "calls": 0}
    send = pool._Worker.send

    def counted(self, message: tuple) -> None:
        if message[0] == "redact":
            sent["chunks"] += 1
            sent["calls"] += len(message[1])
        send(self, message)

    monkeypatch.setattr(pool._Worker, "send", counted)
    return sent


@pytest.fixture(scope="module")
def single_screened(corpus_rows):
    with Redactor(mode="placeholder", keys=KEYS, workers=1, ner=False) as one:
        return one.redact_rows(*corpus_rows, now=NOW, screen=PATTERNS)


@pytest.mark.parametrize(
    ("take_divisor", "min_chunk_divisor", "workers"),
    [(1, 1, 2), (1_000, 1_000_000, 2), (2, 80, 3)],
    ids=["two-halves", "a-trace-a-chunk", "two-workers"],
)
def test_the_rows_are_the_same_whatever_the_split(
    corpus_rows, single_screened, monkeypatch, take_divisor, min_chunk_divisor, workers
):
    """Chunks of every size, taken by whichever process asks first: the rows,
    audit, stats of replacements and screen are those of one process."""
    calls, spans = corpus_rows
    monkeypatch.setattr(pool, "MIN_POOL_ROWS", 10)
    monkeypatch.setattr(pool, "TAKE_DIVISOR", take_divisor)
    monkeypatch.setattr(pool, "MIN_CHUNK_DIVISOR", min_chunk_divisor)
    sent = _count_sent(monkeypatch)
    with Redactor(mode="placeholder", keys=KEYS, workers=workers, ner=False) as many:
        result = many.redact_rows(calls, spans, now=NOW, screen=PATTERNS)
        assert len(many.pool._processes) == workers - 1
    assert (result.calls, result.spans, result.audit) == (
        single_screened.calls,
        single_screened.spans,
        single_screened.audit,
    )
    assert result.residuals == single_screened.residuals
    assert result.stats["replacements"] == single_screened.stats["replacements"]
    assert sent["chunks"] >= 1


def test_the_trace_queue_hands_out_every_trace_once_whole_in_shrinking_chunks():
    calls = [{"trace_id": f"t{i % 50}", "request_json": "x" * (i % 7) * 100} for i in range(400)]
    spans = [{"trace_id": f"t{i % 60}", "attributes_json": "{}"} for i in range(300)]  # ten traces without calls
    chunks = pool.TraceQueue(calls, spans, takers=2)
    taken = []
    while (chunk := chunks.take()) is not None:
        taken.append(chunk)
    assert chunks.take() is None
    assert sorted(i for c, _ in taken for i in c) == list(range(len(calls)))
    assert sorted(i for _, s in taken for i in s) == list(range(len(spans)))
    traces = [{calls[i]["trace_id"] for i in c} | {spans[i]["trace_id"] for i in s} for c, s in taken]
    assert sum(map(len, traces)) == len(set().union(*traces)) == 60  # each trace in one chunk
    sizes = [len(c) + len(s) for c, s in taken]
    assert len(taken) > 4 and sizes[0] > 2 * sizes[-2]  # large first, small where the takers meet


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


def test_a_chunk_uses_the_names_other_processes_read_and_gives_back_those_it_read():
    """What goes with a chunk to a worker and back (``pool._redact_shard``, run here):
    lines whose names came with the chunk are not read again, and the names of
    the lines read for it are returned; the rows are those of one process."""
    calls, spans = rows_of([untemplated_call(n) for n in range(6)])
    with Redactor(mode="placeholder", keys=KEYS, workers=1, ner=True) as one:
        single = one.redact_rows(calls, spans, now=NOW)
    with Redactor(mode="placeholder", keys=KEYS, workers=1, ner=True) as first:
        *_, names = pool._redact_shard(first, None, calls[:3], spans, NOW, None, {}, {})
    assert names and all(isinstance(spans_, tuple) for spans_ in names.values())
    shared = {line: found for line, found in names.items() if any(line in c["system_text"] for c in calls[3:])}
    assert shared  # the system prompt's lines every call holds
    with Redactor(mode="placeholder", keys=KEYS, workers=1, ner=True) as second:
        updates, _, audit, stats, _, read = pool._redact_shard(second, None, calls[3:], [], NOW, None, shared, {})
    assert not set(read) & set(shared)  # learnt, not read again
    assert stats["ner_lines_received"] == len(shared)
    rows = [{**call, **update} for call, update in zip(calls[3:], updates, strict=True)]
    expected = single.calls[3:]
    assert [r["system_text"] for r in rows] == [r["system_text"] for r in expected]
    assert all(AUTHOR not in r["system_text"] for r in rows)
    assert audit == [a for a in single.audit if a["call_id"] in {c["call_id"] for c in calls[3:]}]


def test_a_line_both_processes_need_is_read_in_one_and_the_rows_are_those_of_one_process(monkeypatch):
    """Traces that share system prompt lines, in chunks of one trace each over the
    caller and a worker: the names go both ways and the rows, audit and screen are
    those of one process."""
    monkeypatch.setattr(pool, "MIN_POOL_ROWS", 10)
    monkeypatch.setattr(pool, "TAKE_DIVISOR", 1_000)
    monkeypatch.setattr(pool, "MIN_CHUNK_DIVISOR", 1_000_000)
    calls, spans = rows_of([untemplated_call(n) for n in range(30)])
    with Redactor(mode="placeholder", keys=KEYS, workers=1, ner=True) as one:
        single = one.redact_rows(calls, spans, now=NOW, screen=PATTERNS)
    with Redactor(mode="placeholder", keys=KEYS, workers=2, ner=True) as two:
        sharded = two.redact_rows(calls, spans, now=NOW, screen=PATTERNS)
        assert two.pool.started
        assert len(two.pool._processes) == 1  # the caller is the other process
    assert (sharded.calls, sharded.spans, sharded.audit) == (single.calls, single.spans, single.audit)
    assert sharded.residuals == single.residuals
    assert all(AUTHOR not in call["system_text"] for call in sharded.calls)
    # each process reads a line at most once: at most the shared lines twice
    assert single.stats["ner_lines"] <= sharded.stats["ner_lines"] <= single.stats["ner_lines"] + 4


def test_the_workers_keep_the_names_a_template_writes_as_one_process_does(monkeypatch):
    """The templates are looked up by the caller and sent with each chunk: a worker's
    chunk keeps the operator's names of a template the store has, and reads the whole
    prompt of one it does not have, as the caller's own chunks do."""
    monkeypatch.setattr(pool, "MIN_POOL_ROWS", 10)
    monkeypatch.setattr(pool, "TAKE_DIVISOR", 1_000)
    monkeypatch.setattr(pool, "MIN_CHUNK_DIVISOR", 1_000_000)
    system = f"Você é o assistente {BRAND}. Seu supervisor é {AUTHOR}."
    documents = []
    for n in range(24):
        doc = templated_call("operator" if n % 2 else "deleted", system, {"idioma": "pt"}, [], f"Oi, pedido {n}")
        documents.append({**doc, "trace_id": f"templated-{n}"})
    calls, spans = rows_of(documents)
    with Redactor(mode="placeholder", keys=KEYS, workers=1, ner=True, templates=template_store) as one:
        single = one.redact_rows(calls, spans, now=NOW)
    with Redactor(mode="placeholder", keys=KEYS, workers=2, ner=True, templates=template_store) as two:
        sharded = two.redact_rows(calls, spans, now=NOW)
        assert len(two.pool._processes) == 1
    assert (sharded.calls, sharded.spans, sharded.audit) == (single.calls, single.spans, single.audit)
    kept = [(AUTHOR in call["system_text"], call["template_version"]) for call in sharded.calls]
    assert set(kept) == {(True, "operator"), (False, "deleted")}


def test_a_chunk_failing_here_fails_the_batch_and_the_next_batch_starts_workers_afresh(corpus_rows, monkeypatch):
    calls, spans = corpus_rows
    monkeypatch.setattr(pool, "MIN_POOL_ROWS", 10)
    redact_columns = Redactor._redact_columns

    def failing(self, *args, here: bool = False, **kwargs):
        if here:
            raise RuntimeError("a chunk failed in the caller")
        return redact_columns(self, *args, here=here, **kwargs)

    with Redactor(mode="placeholder", keys=KEYS, workers=2, ner=False) as two:
        monkeypatch.setattr(Redactor, "_redact_columns", failing)
        with pytest.raises(RuntimeError, match="a chunk failed"):
            two.redact_rows(calls, spans, now=NOW)
        assert not two.pool.started  # the worker, left mid-chunk, was ended
        monkeypatch.setattr(Redactor, "_redact_columns", redact_columns)
        again = two.redact_rows(calls, spans, now=NOW)
        assert two.pool.started
    with Redactor(mode="placeholder", keys=KEYS, workers=1, ner=False) as one:
        assert again.calls == one.redact_rows(calls, spans, now=NOW).calls


def test_identifier_values_settled_on_arrow_are_not_judged_again_and_the_classes_stay(corpus_rows, monkeypatch):
    """``redact_rows(settled=)`` with ``residual.settled_cells`` of the raw rows finds, in
    one process and with a worker (each shard given its rows' cells), the classes it finds
    without; a claim it takes is used (a column claimed settled hides its plant), but not
    for a column redaction rewrites (``REWRITTEN_COLUMNS``: judged as written)."""
    import copy

    from pipelines.record.rows import from_columns
    from pipelines.record.schema import TABLES
    from pipelines.redact.redactor import REWRITTEN_COLUMNS
    from pipelines.redact.residual import settled_cells
    from pipelines.redact.row_fields import FIELDS

    calls, spans = (copy.deepcopy(rows) for rows in corpus_rows)
    monkeypatch.setattr(pool, "MIN_POOL_ROWS", 10)
    plants = {"service": "joana.prado@gmail.com", "release": "v 529.982.247-25", "flags": ["ana@gmail.com"]}
    for at, (column, value) in zip(range(3, len(calls), 17), [*plants.items()] * 3, strict=False):
        calls[at][column] = value
    spans[5]["name"] = "card 5555-5555-5555-4444"
    with_blocks = [call for call in calls if call.get("block_hashes")][1::40]
    for call in with_blocks:  # a recorded block the request does not recompute is kept as it came
        call["block_hashes"] = [*call["block_hashes"], {"block": "doc:ana.paula@gmail.com", "sha256": "ab" * 32}]
    columns = {table: [c for c in TABLES[table].names if c not in FIELDS[table]] for table in ("calls", "spans")}
    settled = {
        table: settled_cells(from_columns(rows, TABLES[table]), columns[table])
        for table, rows in (("calls", calls), ("spans", spans))
    }
    assert not settled["calls"]["flags"].all() and not settled["calls"]["service"].all()
    claimed = {"calls": {c: [True] * len(calls) for c in plants}, "spans": {}}
    for workers in (1, 2):
        with Redactor(mode="placeholder", keys=KEYS, workers=workers, ner=False) as redactor:
            plain = redactor.redact_rows(calls, spans, now=NOW, screen=PATTERNS)
            judged = redactor.redact_rows(calls, spans, now=NOW, screen=PATTERNS, settled=settled)
            hidden = redactor.redact_rows(calls, spans, now=NOW, screen=PATTERNS, settled=claimed)
            assert redactor.pool.started == (workers == 2)
        assert judged.residuals == plain.residuals, workers
        scanned = {
            t: row_residuals(rows, t, load_policy()) for t, rows in (("calls", plain.calls), ("spans", plain.spans))
        }
        assert plain.residuals == scanned, workers  # the block hashes judged in the worker too
        assert all(scanned["calls"][calls.index(call)] == ("email",) for call in with_blocks) and len(with_blocks) > 2
        held = [at for at, classes in enumerate(plain.residuals["calls"]) if classes and calls[at] not in with_blocks]
        assert len(held) >= 9 and plain.residuals["spans"][5] == ("card",)
        # flags are rewritten (a flag may be added), so the claim on them is not taken
        found = [at for at, classes in enumerate(hidden.residuals["calls"]) if classes and calls[at] not in with_blocks]
        assert found == [at for at in held if calls[at]["flags"] == plants["flags"]] == held[2::3]
        # every column that is not a text column or a rewritten one is stored as it came
        for raw, out in zip([*calls, *spans], [*judged.calls, *judged.spans], strict=True):
            kept = set(raw) - set(FIELDS["calls"]) - set(FIELDS["spans"]) - REWRITTEN_COLUMNS
            assert {c: out[c] for c in kept} == {c: raw[c] for c in kept}


def test_the_block_hashes_judged_where_they_are_made_are_not_judged_again(corpus_rows, monkeypatch):
    """In one process ``redact_columns`` judges the block hashes as stored
    (``RowScreen.settled_column``) and the identifier screen takes that judgement:
    a judgement that settles every row hides a planted block name."""
    from pipelines.redact import residual

    calls, spans = corpus_rows
    calls = [dict(call) for call in calls]
    planted = next(call for call in calls if call.get("block_hashes"))
    planted["block_hashes"] = [*planted["block_hashes"], {"block": "doc:ana.paula@gmail.com", "sha256": "ab" * 32}]
    at = calls.index(planted)
    with Redactor(mode="placeholder", keys=KEYS, workers=1, ner=False) as redactor:
        assert redactor.redact_rows(calls, spans, now=NOW, screen=PATTERNS).residuals["calls"][at] == ("email",)
        monkeypatch.setattr(residual.RowScreen, "settled_column", lambda self, values: [True] * len(values))
        assert redactor.redact_rows(calls, spans, now=NOW, screen=PATTERNS).residuals["calls"][at] == ()
