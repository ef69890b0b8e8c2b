"""Redaction at ingest: no raw personal data reaches a Delta table, a log line or asset metadata,
and the residual-PII check fails a materialization when a raw value gets past the redactor."""

import json
import re
from datetime import date

import dagster as dg
import polars as pl
import pytest
from faker import Faker

from pipelines.demo import generate
from pipelines.demo.people import population
from pipelines.record.schema import TABLES
from tests.environments import local_settings, run_stage

DAY = date(2026, 11, 29)
SEED = 21


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("redaction")
    settings = local_settings(tmp)
    generate(settings.source_uri, calls=300, days=1, seed=SEED, end=DAY)
    with dg.instance_for_test() as instance:
        result = run_stage(settings, "ingest", DAY.isoformat(), instance)
        logs = [entry for run in result.results for entry in instance.all_logs(run.run_id)]  # load, then traces
        yield settings, result, logs


def _planted(settings) -> set[str]:
    """The demo customers' emails, tax ids and card numbers that really occur in the raw objects."""
    from pipelines.resources.object_store import ObjectStore

    store = ObjectStore(uri=settings.source_uri)
    raw = "".join(store.read(o.key).decode() for o in store.list_day(DAY))
    values = set()
    for person in population(SEED):
        for value in (person.email, person.tax_id, person.card):
            if value in raw:
                values.add(value)
    return values


def test_no_table_holds_a_planted_value(ingested):
    settings, result, _ = ingested
    assert result.success
    planted = _planted(settings)
    assert len(planted) > 50
    warehouse = settings.warehouse()
    for name in TABLES:
        if warehouse.table(name) is None:
            continue
        text = warehouse.read(name).write_ndjson()
        leaked = [v for v in planted if v in text]
        assert leaked == [], f"{name} holds {len(leaked)} raw values"
    audit = warehouse.read("redaction_audit")
    assert audit.height > 0 and audit["replacements"].sum() > 0


def test_no_log_line_or_metadata_holds_a_planted_value(ingested):
    settings, _, logs = ingested
    planted = _planted(settings)
    dumped = "\n".join(
        (entry.user_message or "")
        + json.dumps(
            {k: str(v.value) for k, v in getattr(entry.dagster_event.event_specific_data, "metadata", {}).items()}
            if entry.dagster_event and hasattr(entry.dagster_event.event_specific_data, "metadata")
            else {}
        )
        for entry in logs
    )
    assert "redaction (placeholder)" in dumped
    assert [v for v in planted if v in dumped] == []


def test_the_residual_check_fails_when_a_raw_value_slips_past(ingested, tmp_path):
    settings, _, _ = ingested
    warehouse = settings.warehouse()
    before = warehouse.version("traces")
    cpf = Faker("pt_BR").cpf()
    row = warehouse.read("calls", pl.col("occurred_date") == DAY).head(1).to_dicts()[0]
    row.update(
        call_id="e" * 64,
        source_uri="planted-by-test",
        record_sha256="planted",
        output_text=f"Your CPF {cpf} is confirmed; receipt sent to ana.souza@gmail.com",
    )
    row["segment"] = list(row["segment"].items()) if isinstance(row["segment"], dict) else row["segment"]
    warehouse.merge("calls", [row])

    result = run_stage(settings, "ingest", DAY.isoformat(), raise_on_error=False)
    assert not result.success
    failed = {e.check_name: e for e in result.get_asset_check_evaluations() if not e.passed}
    assert set(failed) == {"calls_residual_pii"}
    table = failed["calls_residual_pii"].metadata["results"].value
    assert re.search(r"\| email \| \*\*no\*\* \| 1 \|", table) and re.search(r"\| cpf \| \*\*no\*\* \| 1 \|", table)
    assert cpf not in table and "ana.souza" not in table
    assert warehouse.version("traces") == before, "nothing downstream may materialize past a failed check"
