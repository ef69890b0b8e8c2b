"""Authenticated exact replay of encrypt-mode calls, through the real SDK over HTTP
to tracelake's simulator: with the replay key a call whose stores did not rot is
replayed ``exact`` (the simulator receives the bytes the recorded hash witnessed);
without it the same replay is ``approximate`` (``replay_key_absent``); a tampered
token sends nothing; and no plaintext reaches any file tracelake writes."""

from __future__ import annotations

import gzip
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import dagster as dg
import polars as pl
import pyarrow.parquet as pq
import pytest

from assets.replay import replay_summary, replays
from assets.rot import rot_checks
from pipelines.demo import generate
from pipelines.partitions import CANDIDATE_PARTITIONS, candidate_day_key
from pipelines.record.canonical import request_sha256
from pipelines.settings import Settings
from pipelines.simulator import Simulator, running, simulated_llm
from tests.environments import local_settings, run_stage

DAY = date(2026, 11, 20)
KEY = "test-replay-key: 7c0f1e2d3c4b5a69788796a5b4c3d2e1f0"
SLUG = "verify-capture"
CANDIDATE = f"""version: 1
id: {SLUG}
revision: 1
description: the identity-check route replayed as recorded
applies_to: {{services: [account.verify]}}
modes: [capture]
comparison: signals
sample: {{per_stratum: 40}}
"""
VERIFY_CALLS = 10


@dataclass
class EncryptedDay:
    root: Path
    settings: Settings
    instance: dg.DagsterInstance
    planted: set[str]  # the tax ids and emails of the account.verify calls, as the raw traces hold them

    def replay(self, sim: Simulator, monkeypatch: pytest.MonkeyPatch, *, key: bool):
        if key:
            monkeypatch.setenv("TRACELAKE_REDACTION_KEY", KEY)
        else:
            monkeypatch.delenv("TRACELAKE_REDACTION_KEY", raising=False)
        return dg.materialize(
            [replays, replay_summary],
            resources={**self.settings.resources(), "llm": simulated_llm(sim)},
            partition_key=candidate_day_key(SLUG, DAY),
            instance=self.instance,
        )

    def rows(self) -> pl.DataFrame:
        rows = self.settings.warehouse().read("replays", pl.col("candidate") == SLUG)
        return rows.filter(pl.col("service") == "account.verify")


def planted_values(source: Path) -> set[str]:
    values = set()
    for path in source.rglob("verify/*.jsonl.gz"):
        for line in gzip.open(path, "rt"):
            text = json.loads(line)["request"]["messages"][0]["content"]
            values.update(re.findall(r"(?:SSN is|CPF é) (\S+) ", text))
            values.update(re.findall(r"(\S+@\S+)\.$", text))
    return values


@pytest.fixture(scope="module")
def encrypted_day(tmp_path_factory) -> Iterator[EncryptedDay]:
    root = tmp_path_factory.mktemp("exact")
    registry = root / "candidates"
    registry.mkdir()
    (registry / f"{SLUG}.yaml").write_text(CANDIDATE)
    settings = local_settings(root, candidates_uri=str(registry), redaction_mode="encrypt")
    (root / "dagster").mkdir()
    with pytest.MonkeyPatch.context() as patch, dg.instance_for_test(temp_dir=str(root / "dagster")) as instance:
        patch.setenv("TRACELAKE_REDACTION_KEY", KEY)
        generate(
            settings.source_uri, calls=20, days=1, seed=5, end=DAY, stores_out=settings.stores_uri, verify_calls=10
        )
        assert run_stage(settings, "ingest", DAY.isoformat(), instance).success
        assert dg.materialize(
            [rot_checks], resources=settings.resources(), partition_key=DAY.isoformat(), instance=instance
        ).success
        instance.add_dynamic_partitions(CANDIDATE_PARTITIONS, [SLUG])
        yield EncryptedDay(root, settings, instance, planted_values(Path(settings.source_uri)))


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with running() as simulator:
        yield simulator


def received_params(sim: Simulator, since: int = 0) -> dict[str, dict]:
    """custom_id -> the Messages params of every batch entry the simulator received."""
    out = {}
    for entry in sim.log[since:]:
        if entry.route == "batch_create" and entry.body:
            out.update({r["custom_id"]: r["params"] for r in entry.body.get("requests") or []})
    return out


def readable(path: Path) -> bytes:
    """A file's bytes, plus what they hold decompressed: a Parquet file's rows, a gzip member's text."""
    data = path.read_bytes()
    if path.suffix == ".parquet":
        rows = pq.read_table(path).to_pylist()
        data += json.dumps(rows, default=str, ensure_ascii=False).encode()
    elif path.suffix == ".gz":
        data += gzip.decompress(data)
    return data


def files_holding(root: Path, values: set[str], skip: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """file -> the values found in it (every file under ``root`` but the ``skip`` folders)."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and not any(part in skip for part in path.relative_to(root).parts):
            data = readable(path)
            hits = sorted(v for v in values if v.encode() in data)
            if hits:
                found[str(path.relative_to(root))] = hits
    return found


def test_with_the_key_an_unrotted_encrypted_call_replays_exact_and_the_simulator_gets_the_witnessed_bytes(
    encrypted_day, sim, monkeypatch
):
    before = len(sim.log)
    assert encrypted_day.replay(sim, monkeypatch, key=True).success
    rows = encrypted_day.rows()
    exact = rows.filter(pl.col("fidelity") == "exact")
    # every account.verify call that has a request is exact (the route has no template to rot)
    assert exact.height >= VERIFY_CALLS - 2 and exact.height == rows.filter(pl.col("request_key").is_not_null()).height
    sent = received_params(sim, before)
    for row in exact.iter_rows(named=True):
        params = sent[row["request_key"]]
        # what went over HTTP, hashed with the record's hashing: the recorded hash
        assert request_sha256(params) == row["recorded_request_sha256"] == row["request_sha256"]
        assert "<ENC:" not in json.dumps(params)
        # the simulator echoed the tax id: stored sealed again, as a token
        assert "<ENC:" in row["new_output"] and not any(v in row["new_output"] for v in encrypted_day.planted)


def test_without_the_key_the_same_replay_is_approximate_and_says_why(encrypted_day, sim, monkeypatch):
    before = len(sim.log)
    assert encrypted_day.replay(sim, monkeypatch, key=False).success
    rows = encrypted_day.rows().filter(pl.col("request_key").is_not_null())
    assert rows.height >= VERIFY_CALLS - 2
    assert set(rows["fidelity"]) == {"approximate"}
    assert all(list(r) == ["replay_key_absent"] for r in rows["fidelity_reasons"])
    # the tokens went out, never a plaintext
    sent = received_params(sim, before)
    assert len(sent) == rows.height
    for params in sent.values():
        assert "<ENC:" in json.dumps(params)
        assert not any(v in json.dumps(params, ensure_ascii=False) for v in encrypted_day.planted)


def test_no_plaintext_in_any_file_written_after_an_exact_replay_and_each_decryption_is_logged(
    encrypted_day, sim, monkeypatch, caplog
):
    caplog.set_level(logging.DEBUG)
    planted = encrypted_day.planted
    assert len(planted) >= VERIFY_CALLS
    # the search finds them where they are: the raw traces (tracelake never writes there)
    assert files_holding(Path(encrypted_day.settings.source_uri), planted)
    result = encrypted_day.replay(sim, monkeypatch, key=True)
    assert result.success
    run_id = result.run_id
    # warehouse (every table, _delta_log included), Dagster storage, captured logs
    assert (encrypted_day.root / "warehouse" / "replays" / "_delta_log").is_dir()
    assert list((encrypted_day.root / "warehouse" / "llm_requests").rglob("*.parquet"))
    assert list((encrypted_day.root / "dagster").rglob("*"))
    assert files_holding(encrypted_day.root, planted, skip=("source",)) == {}
    assert not [v for v in planted if v in caplog.text]
    log = encrypted_day.settings.warehouse().read("unredaction_log", pl.col("run_id") == run_id)
    exact = encrypted_day.rows().filter(pl.col("fidelity") == "exact")
    # one row per decrypted call, and the run's decryptions are exactly the exact replays' calls
    assert log.height == log["call_id"].n_unique() == exact.height
    assert set(log["call_id"]) == set(exact["call_id"])
    assert set(log["purpose"]) == {"replay"} and set(log["outcome"]) == {"verified"}
    assert set(log["candidate"]) == {SLUG} and log["actor"].null_count() == 0
    assert not [v for v in planted if v in json.dumps(log.to_dicts(), default=str, ensure_ascii=False)]


def test_tracelake_replay_call_id_is_exact_with_the_key_and_logs_the_decryption(encrypted_day, sim, monkeypatch):
    from typer.testing import CliRunner

    from pipelines.cli import app

    exact = encrypted_day.rows().filter(pl.col("fidelity") == "exact")
    call_id = exact["call_id"][0]
    settings = encrypted_day.settings
    for name, value in {"TRACELAKE_WAREHOUSE": settings.warehouse_uri, "COLUMNS": "240", **sim.env()}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TRACELAKE_REDACTION_KEY", raising=False)
    result = CliRunner().invoke(app, ["replay", call_id])
    assert result.exit_code == 0, result.output
    assert "fidelity: approximate (replay_key_absent)" in result.output
    monkeypatch.setenv("TRACELAKE_REDACTION_KEY", KEY)
    before = len(sim.log)
    result = CliRunner().invoke(app, ["replay", call_id])
    assert result.exit_code == 0, result.output
    assert "fidelity: exact" in result.output
    assert not [v for v in encrypted_day.planted if v in result.output]  # the echo is shown sealed
    # the same request as the nightly capture replay's: answered from the ledger, or sent as witnessed
    sent = [e.body for e in sim.log[before:] if e.route == "messages"]
    assert all(request_sha256(b) == exact["recorded_request_sha256"][0] for b in sent)
    log = settings.warehouse().read("unredaction_log", pl.col("run_id").str.starts_with("replay-"))
    assert log["call_id"].to_list() == [call_id] and log["outcome"].to_list() == ["verified"]


def test_tracelake_investigate_takes_the_exact_path_with_the_key_and_says_which_it_used(
    encrypted_day, sim, monkeypatch, tmp_path
):
    from typer.testing import CliRunner

    from pipelines.cli import app

    call_id = encrypted_day.rows().filter(pl.col("fidelity") == "exact")["call_id"][0]
    settings = encrypted_day.settings
    for name, value in {"TRACELAKE_WAREHOUSE": settings.warehouse_uri, "COLUMNS": "240", **sim.env()}.items():
        monkeypatch.setenv(name, value)
    report = tmp_path / "report.html"
    monkeypatch.delenv("TRACELAKE_REDACTION_KEY", raising=False)
    without = CliRunner().invoke(app, ["investigate", "--call-id", call_id, "--n", "2", "-o", str(report)])
    assert "replay path: stored request (approximate)" in without.output, without.output
    monkeypatch.setenv("TRACELAKE_REDACTION_KEY", KEY)
    before = len(sim.log)
    result = CliRunner().invoke(app, ["investigate", "--call-id", call_id, "--n", "2", "-o", str(report)])
    assert "replay path: decrypted request (" in result.output, result.output
    assert "verified against the recorded hash" in result.output
    text = result.output + report.read_text()
    assert not [v for v in encrypted_day.planted if v in text]  # decrypted text is never shown or written
    sent = [e.body for e in sim.log[before:] if e.route == "messages"]
    assert not [b for b in sent if "<ENC:" in json.dumps(b)]  # the values the application sent, not tokens
    log = settings.warehouse().read("unredaction_log", pl.col("run_id").str.starts_with("investigate-"))
    assert log["call_id"].to_list() == [call_id] and log["outcome"].to_list() == ["verified"]


def test_a_tampered_token_fails_closed_with_a_clear_error_and_sends_nothing(encrypted_day, sim, monkeypatch):
    warehouse = encrypted_day.settings.warehouse()
    calls = warehouse.read("calls", pl.col("service") == "account.verify").to_dicts()
    victim = next(c for c in calls if "<ENC:" in (c["request_json"] or ""))
    token = re.search(r"<ENC:[A-Z_]+:[^:]+:([A-Za-z0-9_-]+)>", victim["request_json"])
    sealed = token.group(1)
    flipped = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
    tampered = victim["request_json"].replace(sealed, flipped)
    # a stored row is rewritten when its record hash changes: someone editing the table directly
    warehouse.merge("calls", [{**victim, "request_json": tampered, "record_sha256": "0" * 64}])
    assert warehouse.read("calls", pl.col("call_id") == victim["call_id"])["request_json"][0] == tampered
    before = len(sim.log)
    assert encrypted_day.replay(sim, monkeypatch, key=True).success  # one bad call does not stop the day
    row = encrypted_day.rows().filter(pl.col("call_id") == victim["call_id"]).to_dicts()[0]
    assert (row["fidelity"], row["fidelity_reasons"], row["request_key"]) == ("ineligible", ["decryption_failed"], None)
    assert victim["call_id"] in row["error"] and "does not decrypt" in row["error"]
    assert "nothing was sent" in row["error"]
    # nothing of that call reached the simulator (the others were answered from the ledger)
    for params in received_params(sim, before).values():
        assert request_sha256(params) != victim["rendered_request_sha256"]
    log = warehouse.read("unredaction_log", pl.col("call_id") == victim["call_id"])
    assert "decryption_failed" in set(log["outcome"])
