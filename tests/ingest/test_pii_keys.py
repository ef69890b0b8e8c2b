"""Keys (issue 9): outside the demo a run without TRACELAKE_HASH_KEY stops with a
clear error instead of using the published demo key; AWS secrets reach the
warehouse as dg.EnvVar references, never as config values the UI shows."""

from __future__ import annotations

import dataclasses
import re
from datetime import date

import dagster as dg
import pytest
from dagster._serdes import serialize_value
from typer.testing import CliRunner

from pipelines.cli.app import app
from pipelines.redact.keys import DEMO_HASH_KEY, KeyRing, MissingKey
from pipelines.settings import Settings
from tests.environments import local_settings, run_stage
from tests.ingest.test_pii_at_rest import DAY, write_source

SECRET = "planted-aws-secret-4f9c2e7a1b"


def test_no_hash_key_and_no_demo_opt_in_is_an_error(monkeypatch):
    monkeypatch.delenv("TRACELAKE_HASH_KEY", raising=False)
    monkeypatch.delenv("TRACELAKE_DEMO", raising=False)
    with pytest.raises(MissingKey, match="TRACELAKE_HASH_KEY is not set.*TRACELAKE_DEMO=1"):
        KeyRing.from_env()
    assert KeyRing.from_env({"TRACELAKE_DEMO": "1"}).hash_key_is_demo
    assert not KeyRing.from_env({"TRACELAKE_HASH_KEY": "a-real-secret-0123456789"}).hash_key_is_demo
    # decrypting needs no hash key
    assert KeyRing.from_env({}, need_hash_key=False).hash_secret == DEMO_HASH_KEY.encode()


def test_an_ingest_run_without_the_key_stops_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("TRACELAKE_HASH_KEY", raising=False)
    monkeypatch.delenv("TRACELAKE_DEMO", raising=False)
    write_source(tmp_path)
    settings = local_settings(tmp_path)
    with dg.instance_for_test() as instance:
        result = run_stage(settings, "ingest", DAY.isoformat(), instance, raise_on_error=False)
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure)
        assert "TRACELAKE_HASH_KEY is not set" in failure.step_failure_data.error.to_string()
    assert settings.warehouse().table("calls") is None


def test_the_cli_run_says_what_to_set(tmp_path, monkeypatch):
    monkeypatch.delenv("TRACELAKE_HASH_KEY", raising=False)
    monkeypatch.delenv("TRACELAKE_DEMO", raising=False)
    monkeypatch.setenv("TRACELAKE_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("TRACELAKE_SOURCE", str(tmp_path / "source"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["run", "ingest", "--date", date(2026, 11, 20).isoformat()])
    assert result.exit_code == 2
    assert "TRACELAKE_HASH_KEY" in result.output and "TRACELAKE_DEMO=1" in result.output


def test_aws_secrets_are_environment_references(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDPLANTED")
    settings = Settings.from_env()
    resource = settings.resources()["warehouse"]
    assert isinstance(resource.secret_access_key, dg.EnvVar) and isinstance(resource.access_key_id, dg.EnvVar)
    # used directly (CLI), the reference resolves to the value
    direct = dataclasses.replace(settings.warehouse(), uri="s3://bucket/wh")
    assert direct.storage_options()["AWS_SECRET_ACCESS_KEY"] == SECRET
    # what Dagster stores and shows (the job snapshot's config defaults) names the variable, not the value
    write_source(tmp_path)
    local = local_settings(tmp_path)
    home = tmp_path / "dagster"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        result = run_stage(local, "ingest", DAY.isoformat(), instance)
        assert result.success
        # the job snapshot (stored compressed) holds the resource config the launchpad shows
        snapshot = serialize_value(instance.get_job_snapshot(result.dagster_run.job_snapshot_id))
    assert re.search(r"secret_access_key\W+env\W+AWS_SECRET_ACCESS_KEY", snapshot)
    assert SECRET not in snapshot and "AKIDPLANTED" not in snapshot
    stored = "\n".join(p.read_bytes().decode("utf-8", "replace") for p in home.rglob("*") if p.is_file())
    assert "raw_traces" in stored and SECRET not in stored
