"""The `tracelake` command: demo data, running a stage for a day, listing tables, SQL."""

import json
import re

from typer.testing import CliRunner

from pipelines.cli import app


def test_demo_run_tables_and_sql(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no dagster.yaml here: runs go to a throwaway instance
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("TRACELAKE_SOURCE", str(tmp_path / "src"))
    monkeypatch.setenv("TRACELAKE_WAREHOUSE", str(tmp_path / "wh"))
    monkeypatch.setenv("TRACELAKE_STORES", str(tmp_path / "stores"))
    runner = CliRunner()

    made = runner.invoke(app, ["demo-data", "--calls", "150", "--days", "2", "--end", "2026-11-29"])
    assert made.exit_code == 0, made.output
    assert (tmp_path / "src" / "2026" / "11" / "28").is_dir() and (tmp_path / "stores" / "models.yaml").exists()

    ran = runner.invoke(app, ["run", "ingest", "--date", "2026-11-28", "--to", "2026-11-29"])
    assert ran.exit_code == 0, ran.output
    assert "ingest done for 2026-11-28..2026-11-29" in ran.output

    listed = runner.invoke(app, ["tables"])
    assert listed.exit_code == 0, listed.output
    assert re.search(r"calls\s*│\s*[1-9][\d,]*\s*│\s*\d+\s*│", listed.output), listed.output  # rows, version

    # tables written in the current layout: migrate rewrites nothing (tests/ingest/test_migration.py rewrites some)
    migrated = runner.invoke(app, ["migrate"])
    assert migrated.exit_code == 0 and "calls: already in the current layout" in migrated.output, migrated.output
    assert "nothing to rewrite" in migrated.output

    query = "SELECT occurred_date, count(*) AS n FROM calls GROUP BY occurred_date ORDER BY occurred_date"
    answered = runner.invoke(app, ["sql", query, "--format", "json"])
    assert answered.exit_code == 0, answered.output
    rows = json.loads(answered.stdout.strip().splitlines()[-1])
    assert [r["occurred_date"] for r in rows] == ["2026-11-28", "2026-11-29"] and all(r["n"] > 100 for r in rows)


def test_bad_input_gets_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAKE_WAREHOUSE", str(tmp_path / "wh"))
    runner = CliRunner()
    unknown = runner.invoke(app, ["run", "ingestt", "--date", "2026-11-29"])
    assert unknown.exit_code != 0 and "unknown stage 'ingestt'" in unknown.output
    backwards = runner.invoke(app, ["run", "ingest", "--date", "2026-11-29", "--to", "2026-11-01"])
    assert backwards.exit_code != 0 and "is before --date" in backwards.output
    monkeypatch.setenv("TRACELAKE_START_DATE", "2026-11-25")
    early = runner.invoke(app, ["run", "ingest", "--date", "2026-11-21"], terminal_width=200)
    assert early.exit_code != 0 and "before the first daily partition" in early.output
    assert "TRACELAKE_START_DATE=2026-11-21" in early.output and "Unknown" not in early.output
    broken = runner.invoke(app, ["sql", "SELEC nonsense"])
    assert broken.exit_code == 2 and "query failed" in broken.output
