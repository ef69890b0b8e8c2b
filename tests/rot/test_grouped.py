"""The grouped rot check (one verdict per ingredient set, spread in polars) gives
every call exactly the verdict the per-call check gives it: on demo days with
and without templates that print per-call values, on the storage layout that
leaves `request_sha256` null where it equals the recorded hash, and on requests
the splice cannot read (non-canonical bytes, a falsy metadata value)."""

from __future__ import annotations

import hashlib
import json
import random
from datetime import UTC, date, datetime
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from pipelines.demo import generate
from pipelines.demo import stores as demo
from pipelines.ingest.objects import SourceObject, ingest_object
from pipelines.record.schema import CALLS
from pipelines.record.set_key import KEY_COLUMN, set_keys
from pipelines.resources.object_store import ObjectStore
from pipelines.resources.stores import DocumentStore, ModelAliasStore, ParamsStore, TemplateStore, load_ingredients
from pipelines.resources.warehouse import Warehouse
from pipelines.rot.check import CALL_COLUMNS, STATUSES, Checker
from pipelines.rot.grouped import VERDICT_FIELDS, check_frame
from pipelines.rot.ingredients import TemplateVersion
from pipelines.rot.printed_scores import PrintedScores, never_reads_scores
from pipelines.rot.render import render_template
from pipelines.rot.template_inputs import DocRef

DAY = date(2026, 11, 20)
CLOCK = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)


def demo_day(root: Path, per_call_values: bool) -> tuple[pl.DataFrame, Checker]:
    """A demo day's calls as the asset reads them, and a checker on its aged stores."""
    stores = str(root / "stores")
    generate(
        str(root / "source"), calls=400, days=1, seed=5, end=DAY, stores_out=stores, per_call_values=per_call_values
    )
    source = ObjectStore(uri=str(root / "source"))
    rows = []
    for info in source.list_day(DAY):
        data = source.read(info.key)
        obj = SourceObject(info.key, source.uri_for(info.key), info.etag, info.size, info.last_modified, data)
        rows += ingest_object(obj, DAY, "test", CLOCK).calls
    table = pa.Table.from_pylist(rows, schema=CALLS)
    # as the warehouse stores them: with their ingredient-set keys
    frame = with_stored_keys(pl.from_arrow(table).select(CALL_COLUMNS))
    where = {"uri": stores}
    versions = frame.select("template_id", "template_version").drop_nulls().unique().iter_rows()
    ingredients = load_ingredients(
        TemplateStore(**where), DocumentStore(**where), ModelAliasStore(**where), ParamsStore(**where), versions
    )
    return frame, Checker(ingredients, CLOCK)


def with_stored_keys(frame: pl.DataFrame, every: int = 1) -> pl.DataFrame:
    """The frame as the warehouse stores it: ``rot_set_key`` derived from each row
    (``record.derived``); with ``every`` > 1 only every so many rows have it, the others
    are null (a call that shares no set's verdict)."""
    keys = set_keys(frame)
    stored = pl.Series([k if i % every == 0 else None for i, k in enumerate(keys)], dtype=pl.String)
    return frame.with_columns(stored.alias(KEY_COLUMN))


def assert_same_verdicts(frame: pl.DataFrame, checker: Checker) -> pl.DataFrame:
    """The grouped check gives every call the per-call verdict, whether the day's set keys
    are computed at check time (rows without the column), stored, or null for some."""
    fresh = Checker(checker.ingredients, checker.clock)
    want = fresh.check_all(frame.iter_rows(named=True))
    computed = frame.drop(KEY_COLUMN, strict=False)
    results = []
    for day in (computed, with_stored_keys(frame), with_stored_keys(frame, every=2)):
        got = check_frame(Checker(checker.ingredients, checker.clock), day)
        assert got.height == len(want)
        for expected, row in zip(want, got.iter_rows(named=True), strict=True):
            for name in VERDICT_FIELDS:
                assert row[name] == getattr(expected, name), (expected.call_id, name)
        results.append(got)
    assert results[0].equals(results[1]) and results[1].equals(results[2])
    return results[0]


@pytest.fixture(scope="module", params=[True, False], ids=["per-call-values", "no-per-call-values"])
def day(request, tmp_path_factory):
    return demo_day(tmp_path_factory.mktemp("day"), request.param), request.param


def test_grouped_verdicts_are_the_per_call_verdicts_on_demo_days(day):
    (frame, checker), per_call_values = day
    got = assert_same_verdicts(frame, checker)
    statuses = set(got["status"])
    # the day has every kind of verdict, so every path of the check was compared
    assert {"verified", "rotted", "unverifiable"} <= statuses <= set(STATUSES)
    assert ("impure" in statuses) == per_call_values  # only the dated triage template is impure
    components = set(got["components"].explode().drop_nulls())
    assert {"template_changed", "document_changed", "document_missing", "model_alias_moved"} <= components
    rerendered = got.filter(pl.col("status") == "rotted")["rerendered_sha256"]
    assert rerendered.null_count() == 0 and rerendered.n_unique() > 1


def _rehashed(request_json: str) -> dict:
    sha = hashlib.sha256(request_json.encode()).hexdigest()
    return {"request_json": request_json, "request_sha256": sha, "rendered_request_sha256": sha}


@pytest.mark.parametrize("metadata", [{}, "", False, {"a": "b"}, {"tenant": {"x": []}}])
def test_recorded_metadata_of_any_value_gives_the_per_call_verdict(day, metadata):
    """rerender_request leaves a falsy metadata value out: the calls that have one
    cannot share a verdict with those that do not."""
    (frame, checker), _ = day
    rows = frame.to_dicts()
    rng = random.Random(3)
    changed = 0
    for row in rows:
        if not row["request_json"] or rng.random() < 0.5:
            continue
        request = json.loads(row["request_json"])
        request["metadata"] = metadata
        row.update(_rehashed(json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)))
        changed += 1
    assert changed > 50
    edited = pl.DataFrame(rows, schema=frame.schema)
    got = assert_same_verdicts(edited, checker)
    assert got.filter(pl.col("status") == "rotted")["rerendered_sha256"].null_count() == 0


def test_printed_scores_fill_the_same_bytes_as_a_full_rendering():
    source = demo.capture_time_stores().templates[demo.SUPPORT_TEMPLATE]["v3"]
    printed = PrintedScores.of(TemplateVersion(demo.SUPPORT_TEMPLATE, "v3", source))
    assert printed is not None
    rng = random.Random(1)
    variables = {"company": "Acme", "customer_tier": "pro", "language_name": "English"}
    docs = [DocRef("kb-a", 'text with "quotes"\nand a line', None), DocRef("kb-b", "ünïcode", None)]
    skeleton = printed.skeleton(json.dumps(variables), docs, CLOCK)
    for _ in range(20):
        scores = [round(rng.uniform(0, 1), rng.choice([2, 4, 7])) for _ in docs]
        full = render_template(
            source,
            variables,
            [{"doc_id": d.doc_id, "text": d.text, "score": s} for d, s in zip(docs, scores, strict=True)],
            clock=CLOCK,
        )
        assert printed.text(skeleton, scores) == full
        assert printed.canonical(skeleton, scores) == json.dumps(full, ensure_ascii=False)


@pytest.mark.parametrize(
    "source",
    [
        "{% for d in documents %}{% if d.score > 0.5 %}{{ d.text }}{% endif %}{% endfor %}",
        "{% for d in documents|sort(attribute='score') %}{{ d.score }}{% endfor %}",
        "{% for d in documents %}{% set s = d.score %}{{ s }}{% endfor %}",
        "{{ documents[0].score }}",
        "{% for d in documents %}{{ d|tojson }}{% endfor %}",
        "{% for d in documents %}{{ d.score }} {{ loop.index }}{% endfor %}{{ now() }}",
    ],
)
def test_templates_that_use_scores_otherwise_are_rendered_per_call(source):
    template = TemplateVersion("t", "v", source)
    assert PrintedScores.of(template) is None
    assert not never_reads_scores(template)


@pytest.mark.parametrize(
    ("source", "reads"),
    [
        ("{% for d in documents %}<{{ d.doc_id }}>{{ d['text'] }}{% endfor %}", False),
        ("{% for d in documents %}{{ d }}{% endfor %}", True),
        ("{{ documents|map(attribute='score')|join(',') }}", True),
        ("{% for d in documents %}{{ d[key] }}{% endfor %}", True),
    ],
)
def test_templates_that_read_no_score_are_told_from_their_ast(source, reads):
    assert never_reads_scores(TemplateVersion("t", "v", source)) is not reads


def test_the_demo_option_prints_no_per_call_values_and_keeps_the_default():
    plain = demo.capture_time_stores(per_call_values=False).templates
    default = demo.capture_time_stores().templates
    assert "score" not in plain[demo.SUPPORT_TEMPLATE]["v3"] and "now()" not in plain[demo.TRIAGE_TEMPLATE]["v1"]
    assert "score" in default[demo.SUPPORT_TEMPLATE]["v3"] and "now()" in default[demo.TRIAGE_TEMPLATE]["v1"]
    for template_id, versions in plain.items():
        for version, source in versions.items():
            assert never_reads_scores(TemplateVersion(template_id, version, source))


def test_a_day_whose_calls_carry_the_stored_key_computes_none(day, monkeypatch):
    (frame, checker), _ = day
    stored = with_stored_keys(frame)
    want = check_frame(Checker(checker.ingredients, checker.clock), stored)

    def computed(calls):
        raise AssertionError(f"{calls.height} set keys computed at check time")

    monkeypatch.setattr("pipelines.rot.grouped.set_keys", computed)
    assert check_frame(Checker(checker.ingredients, checker.clock), stored).equals(want)


def test_the_set_key_names_the_ingredient_set(day):
    (frame, _), _ = day
    keys = set_keys(frame)
    grouped = keys.drop_nulls()
    assert grouped.str.len_chars().unique().to_list() == [16] and grouped.str.contains("^[0-9a-f]+$").all()
    # one key per set: the calls of a key share every field the key is made of
    fields = frame.select(
        "template_id",
        "template_version",
        "template_variables_json",
        "service",
        "model_alias",
        docs=pl.col("retrieval").struct.field("documents").list.eval(pl.element().struct.field("doc_id")),
    ).with_columns(keys.alias("key"))
    per_key = fields.filter(pl.col("key").is_not_null()).group_by("key").agg(pl.all().n_unique())
    assert per_key.drop("key").max_horizontal().max() == 1
    assert 1 < grouped.n_unique() < grouped.len()
    # calls without a template version cannot share a verdict
    assert keys.filter(frame["template_version"].is_null()).is_null().all()

    row = frame.filter(keys.is_not_null()).head(1)
    base = set_keys(row).item()
    blocks = row["block_hashes"].to_list()[0]
    docs = [b for b in blocks if b["block"].startswith("document:")]
    assert docs, "the first groupable call has documents"
    moved = [dict(b, sha256="0" * 64) if b is docs[0] else b for b in blocks]
    request = json.loads(row["request_json"].item())
    changes = {
        "template_variables_json": pl.lit('{"other": 1}'),
        "model_alias": pl.lit("another-alias"),
        "block_hashes": pl.lit(pl.Series([moved], dtype=row.schema["block_hashes"])),
        "request_json": pl.lit(json.dumps({**request, "metadata": {}}, sort_keys=True, separators=(",", ":"))),
    }
    for column, value in changes.items():
        assert set_keys(row.with_columns(value.alias(column))).item() not in (base, None), column
    assert set_keys(row.with_columns(pl.lit(["redacted"]).alias("flags"))).item() is None
    without_doc_hash = pl.Series([[b for b in blocks if b is not docs[0]]], dtype=row.schema["block_hashes"])
    assert set_keys(row.with_columns(pl.lit(without_doc_hash).alias("block_hashes"))).item() is None


def test_the_warehouse_stores_the_key_of_every_call_it_writes(day, tmp_path):
    (frame, checker), _ = day
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    rows = frame.with_columns(pl.lit(None, pl.String).alias(KEY_COLUMN))
    full = pl.from_arrow(pa.Table.from_pylist(rows.to_dicts(), schema=CALLS))
    warehouse.merge("calls", full, partitions=[DAY])
    stored = warehouse.read("calls", columns=list(CALL_COLUMNS)).sort("call_id")
    assert stored[KEY_COLUMN].null_count() < stored.height
    assert stored[KEY_COLUMN].equals(set_keys(stored))
    assert check_frame(Checker(checker.ingredients, checker.clock), stored).equals(
        check_frame(Checker(checker.ingredients, checker.clock), frame.sort("call_id"))
    )


def test_verdicts_that_miss_a_call_fail_instead_of_shifting_the_day(day):
    """The narrow assembly reads the per-call columns from the day in place: pieces that
    do not cover every call once must fail, not give one call another's verdict."""
    from pipelines.rot.grouped import _assembled, _Piece

    (frame, checker), _ = day
    done = check_frame(Checker(checker.ingredients, checker.clock), frame)
    base = frame.with_row_index("_row")
    table = done.select("status", "components", "missing", "rotted_blocks", "basis", "template_sha256")
    table = table.with_columns(done.select("model_snapshot", "detail"))
    rows = done.select("replay_fidelity", "rerendered_sha256").with_row_index("_row").with_row_index("_v")
    whole = _assembled(base, [_Piece(rows.select("_row", "_v", "replay_fidelity", "rerendered_sha256"), table)], None)
    assert whole.drop("index_snapshot").equals(done.drop("index_snapshot"))
    short = rows.slice(1).select("_row", "_v", "replay_fidelity", "rerendered_sha256")
    with pytest.raises(pl.exceptions.ShapeError):
        _assembled(base, [_Piece(short, table)], None)


def test_the_splice_in_polars_hashes_what_parsing_each_request_hashes():
    """``_RerenderedHashes`` (recorded bytes stripped, today's concatenated, sha256 in
    polars) against ``_rerendered_by_parsing`` on the same requests: multi-byte text, a
    metadata value, a falsy one (left out today), and bytes the set's prefix does not bound;
    two classes with other pieces, and calls of a class without pieces (null)."""
    from types import SimpleNamespace

    from pipelines.rot.grouped import _rerendered_by_parsing, _RerenderedHashes
    from pipelines.rot.rerender import canonical_object

    recorded = {"max_tokens": "100", "model": '"m-old"', "system": '"Bonjour é ✓"'}
    today = {**recorded, "model": '"m-new"', "system": '"Grüße ✓"'}

    def request(own: dict[str, str], **blocks: str) -> str:
        return canonical_object({**recorded, **blocks, **own})

    texts = [
        request({"messages": '[{"content":"naïve ☕","role":"user"}]'}),
        request({"messages": '[{"content":"hi","role":"user"}]', "metadata": '{"a":1}'}),
        request({"messages": '[{"content":"hi","role":"user"}]', "metadata": "{}"}),
        request({"messages": "[]"}, max_tokens="200"),  # not the set's recorded prefix
    ]
    later = {**today, "model": '"m-later"'}
    rows = [0, 1, 2, 3, 0, 0, 1, 3]
    members = pl.DataFrame(
        {
            "_row": rows,
            "_class": [0] * 5 + [1, 1, 2],
            "_metadata_dropped": [i == 2 for i in rows],  # texts[2] records a falsy metadata value
            "rendered_request_sha256": [hashlib.sha256(texts[i].encode()).hexdigest() for i in rows],
        },
        schema_overrides={"_row": pl.UInt32, "_class": pl.UInt32},
    )
    sets = SimpleNamespace(base=pl.DataFrame({"request_json": texts}))
    pieces = {0: (recorded, today), 1: (recorded, later)}
    got = _RerenderedHashes(sets, members).hashes(pieces, {}).to_list()
    want = [_rerendered_by_parsing(texts[i], pieces[c][1]) for i, c in zip(rows[:7], members["_class"], strict=False)]
    assert got == [*want, None]
    assert got[0] != got[1] and got[0] == got[4] and got[0] != got[5]
