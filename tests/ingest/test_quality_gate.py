"""The data-quality checks can fail, and a failed blocking check stops the assets downstream."""

from datetime import UTC, date, datetime

import polars as pl

from pipelines.demo import generate
from pipelines.ingest import quality
from tests.environments import local_settings, run_stage

DAY = date(2026, 11, 29)


def test_a_planted_bad_row_fails_the_calls_check_and_blocks_traces(tmp_path, instance):
    settings = local_settings(tmp_path)
    generate(settings.source_uri, calls=120, days=1, seed=2, end=DAY)
    assert run_stage(settings, "ingest", DAY.isoformat(), instance).success
    warehouse = settings.warehouse()
    traces_version = warehouse.version("traces")

    # a bug upstream wrote a row with a malformed hash and a total that is not the sum of its parts
    row = warehouse.read("calls").head(1).to_dicts()[0]
    row.update(
        call_id="f" * 64,
        request_sha256="not-a-hash",
        source_uri="planted-by-test",
        usage={**row["usage"], "total_tokens": row["usage"]["total_tokens"] + 1},
        record_sha256="x",
    )
    row["segment"] = list(row["segment"].items()) if isinstance(row["segment"], dict) else row["segment"]
    warehouse.merge("calls", [row])

    result = run_stage(settings, "ingest", DAY.isoformat(), instance, raise_on_error=False)
    assert not result.success
    failed = {e.check_name: e for e in result.get_asset_check_evaluations() if not e.passed}
    assert set(failed) == {"calls_quality"}
    table = failed["calls_quality"].metadata["results"].value
    assert "| ColumnValuesToMatchRegex | request_sha256 | **no** | 1 |" in table
    assert "| ColumnValuesToBeInSet | token_total_consistent | **no** | 1 |" in table
    assert "not-a-hash" not in table  # counts, never values
    assert warehouse.version("traces") == traces_version, "traces must not materialize after a failed check"


def test_suites_catch_broken_accounting_and_orphan_llm_spans():
    now = datetime.now(UTC)
    log = pl.DataFrame(
        {
            "source_key": ["a", "a"],
            "etag": ["1", "1"],
            "status": ["ok", "done"],
            "records_read": [3, 3],
            "records_ingested": [3, 2],
            "records_quarantined": [0, 0],
        }
    )
    report = quality.validate("ingest_log", log, now=now)
    assert {r.rule for r in report.failures} == {
        "CompoundColumnsToBeUnique",
        "ColumnPairValuesToBeEqual",
        "ColumnValuesToBeInSet",
    }
    spans = pl.DataFrame(
        {
            "span_key": ["s1", "s2"],
            "trace_id": ["t", "t"],
            "kind": ["llm_call", "tool"],
            "occurred_at": [now, now],
            "call_id": ["c-missing", None],
        }
    )
    report = quality.validate("spans", spans, {"calls": pl.DataFrame({"call_id": ["c-other"]})}, now=now)
    assert [(r.column, r.unexpected) for r in report.failures] == [("llm_call_has_call_row", 1)]


def _one_rule_at_a_time(table: str, frame: pl.DataFrame, now: datetime) -> list[quality.RuleResult]:
    """The reference: each expectation validated on its own (how validate worked before the seventh round)."""
    checked = quality.FRAMES[table](frame, {})
    out = []
    with quality.gx_batch(f"reference-{table}", checked) as batch:
        for expectation in quality._expectations(table, now):
            result = batch.validate(expectation, result_format="BASIC")
            unexpected = int((result.result or {}).get("unexpected_count") or 0)
            out.append((quality._rule_name(expectation), bool(result.success), unexpected))
    return out


def test_a_suite_validated_whole_gives_each_rule_its_own_result():
    now = datetime.now(UTC)
    later = datetime(2030, 1, 1, tzinfo=UTC)
    log = pl.DataFrame(
        {
            "source_key": ["a", "a", "b"],
            "etag": ["1", "1", "2"],
            "status": ["ok", "done", "partial"],
            "records_read": [3, 3, 5],
            "records_ingested": [3, 2, 4],
            "records_quarantined": [0, 1, 1],
        }
    )
    traces = pl.DataFrame(
        {
            "trace_id": ["t1", "t2", None],
            "started_at": [now, now, now],
            "ended_at": [now, now - (later - now), later],
            "call_count": [1, 5, 2],
            "span_count": [2, 3, 2],
        }
    )
    for table, frame in (("ingest_log", log), ("traces", traces)):
        report = quality.validate(table, frame, now=now)
        got = [(r.rule, r.passed, r.unexpected) for r in report.results]
        assert got == _one_rule_at_a_time(table, frame, now), table
        assert not report.passed and any(r.passed for r in report.results), table  # a mix: order matters
