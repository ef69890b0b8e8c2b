"""What the Dagster UI shows (issue 9, section 5): row counts and schemas after an
idempotent re-run, an empty `quarantine` from the first run, a configurable first
partition, CLI runs listed under their job, README names that are the graph's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.record.schema import TABLES
from pipelines.settings import start_date
from tests.environments import local_settings, run_stage
from tests.ingest.test_pii_at_rest import DAY, frozen_call

README = Path(__file__).resolve().parents[2] / "README.md"


def clean_source(root: Path) -> None:
    folder = root / "source" / f"{DAY:%Y/%m/%d}"
    folder.mkdir(parents=True)
    docs = [frozen_call(n, user_id=f"u_{n}", session_id=None, tags=None, segment=None) for n in (1, 2)]
    for doc in docs:
        doc["request"]["messages"] = doc["request"]["messages"][:1]
    (folder / "calls.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")


def materializations(result, asset: str) -> list[dg.AssetMaterialization]:
    return [m for m in result.asset_materializations_for_node("raw_traces") if m.asset_key.to_user_string() == asset]


def test_row_count_and_schema_survive_an_idempotent_rerun_and_quarantine_exists(tmp_path):
    clean_source(tmp_path)
    settings = local_settings(tmp_path)
    with dg.instance_for_test() as instance:
        first = run_stage(settings, "ingest", DAY.isoformat(), instance)
        second = run_stage(settings, "ingest", DAY.isoformat(), instance)
    warehouse = settings.warehouse()
    # no bad record, yet the table is there to query
    assert warehouse.table("quarantine") is not None and warehouse.read("quarantine").height == 0
    for result in (first, second):
        (calls,) = materializations(result, "calls")
        assert calls.metadata["dagster/row_count"].value == 2
        schema = calls.metadata["dagster/column_schema"].schema
        assert [c.name for c in schema.columns] == TABLES["calls"].names
        (quarantine,) = materializations(result, "quarantine")
        assert quarantine.metadata["dagster/row_count"].value == 0
    (rerun,) = materializations(second, "calls")
    assert rerun.metadata["rows_in"].value == 0  # nothing merged, the count still comes from the table
    traces = [m for m in second.asset_materializations_for_node("traces")]
    assert traces[0].metadata["dagster/row_count"].value == 2


def test_the_first_partition_is_configurable(monkeypatch):
    monkeypatch.setenv("TRACELAKE_START_DATE", "2026-10-01")
    assert start_date() == "2026-10-01"
    monkeypatch.delenv("TRACELAKE_START_DATE")
    today = datetime.now(UTC).date()
    assert start_date() == (today - timedelta(days=3)).isoformat()  # the first day `tracelake demo` fills
    monkeypatch.setenv("TRACELAKE_START_DATE", "01/10/2026")
    with pytest.raises(ValueError, match="TRACELAKE_START_DATE='01/10/2026' is not a date: use YYYY-MM-DD"):
        start_date()
    # the partitions definition reads it when the code location loads
    env = {**os.environ, "TRACELAKE_START_DATE": "2026-10-05"}
    code = "from pipelines.partitions import daily; print(daily.get_first_partition_key())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2026-10-05"


def test_cli_runs_are_listed_under_their_job(tmp_path, monkeypatch):
    clean_source(tmp_path)
    monkeypatch.setenv("TRACELAKE_SOURCE", str(tmp_path / "source"))
    monkeypatch.setenv("TRACELAKE_WAREHOUSE", str(tmp_path / "wh"))
    monkeypatch.setenv("TRACELAKE_STORES", str(tmp_path / "stores"))
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    ran = CliRunner().invoke(app, ["run", "ingest", "--date", DAY.isoformat()])
    assert ran.exit_code == 0, ran.output
    with dg.DagsterInstance.get() as instance:
        # the filter the UI's job page uses: the job name and the repository@location tag
        where = dg.RunsFilter(job_name="ingest", tags={".dagster/repository": "__repository__@tracelake"})
        runs = instance.get_runs(filters=where)
    assert len(runs) == 1 and runs[0].tags["dagster/partition"] == DAY.isoformat()


def test_readme_names_are_the_asset_graph():
    from pipelines.definitions import build

    defs = build()
    assets = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    jobs = {j.name for j in defs.resolve_all_job_defs()} - {"__ASSET_JOB"}
    text = README.read_text()
    section = text[text.index("## What runs") : text.index("## Tables")]
    diagram = section[section.index("```") : section.index("```", section.index("```") + 3)]
    named = set(re.findall(r"\b[a-z]+(?:_[a-z]+)+\b|\b(?:calls|spans|traces|quarantine|retention|replays)\b", diagram))
    named -= {"raw_traces"}  # named in the diagram as the multi-asset's op, which it is
    assert named <= assets | {"retention_sweep"}, named - assets
    assert assets <= named, f"assets the README's diagram leaves out: {assets - named}"
    assert all(f"`{job}`" in section for job in jobs)
    assert "op is named raw_traces" in diagram
