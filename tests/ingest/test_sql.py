"""`tracelake sql` (issue 9, section 5): only the warehouse tables are readable,
LIMIT is pushed into the query, and values reach the terminal as inert text."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.settings import Settings

EVIL = "obj\x1b[2J\x1b]0;pwned\x07[bold red]markup[/bold red]\u202eevil"


@pytest.fixture
def warehouse(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAKE_WAREHOUSE", str(tmp_path / "wh"))
    wh = Settings.from_env().warehouse()
    rows = [{"source_key": f"k{i:04d}", "etag": "e", "records_read": i} for i in range(1000)]
    rows.append({"source_key": EVIL, "etag": "e", "records_read": -1})
    wh.merge("ingest_log", rows)
    return wh


def test_file_table_functions_are_refused(tmp_path, warehouse):
    secret = tmp_path / "secret.csv"
    secret.write_text("token\nplanted-file-secret-93ad\n")
    runner = CliRunner()
    for query in (
        f"SELECT * FROM read_csv('{secret}')",
        f"SELECT * FROM \"read_csv\"('{secret}')",
        f"SELECT * FROM READ_CSV /* hidden */ ('{secret}')",
        f"SELECT * FROM read_parquet('{secret}')",
        f"SELECT * FROM ingest_log, read_ndjson('{secret}')",
    ):
        result = runner.invoke(app, ["sql", query])
        assert result.exit_code == 2, (query, result.output)
        assert "query refused" in result.output and "planted-file-secret" not in result.output
    # a string literal that merely mentions one is fine
    ok = runner.invoke(app, ["sql", "SELECT 'read_csv(x)' AS s FROM ingest_log LIMIT 1", "--format", "json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout) == [{"s": "read_csv(x)"}]


def test_limit_is_pushed_into_a_cross_join(warehouse):
    # 1001^3 = a billion rows: building them would need tens of GB; five are computed
    query = (
        "SELECT a.source_key, b.etag, c.records_read FROM ingest_log a CROSS JOIN ingest_log b CROSS JOIN ingest_log c"
    )
    result = CliRunner().invoke(app, ["sql", query, "--limit", "5", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == 5
    table = CliRunner().invoke(app, ["sql", query, "--limit", "5"])
    assert table.exit_code == 0 and "5 rows (limit 5 reached" in table.output


def test_values_are_printed_as_text(warehouse):
    runner = CliRunner()
    query = "SELECT source_key FROM ingest_log WHERE records_read < 0"
    for fmt in ("table", "csv", "json"):
        result = runner.invoke(app, ["sql", query, "--format", fmt], color=True)
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output and "\x07" not in result.output and "\u202e" not in result.output
        assert "[bold red]markup[/bold red]" in result.output  # shown, not interpreted
        if fmt == "json":
            assert json.loads(result.stdout) == [{"source_key": EVIL}]  # escaped by JSON, losslessly
        else:
            assert "\\x1b[2J" in result.output and "\\u202e" in result.output
