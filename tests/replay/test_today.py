"""Replay against the API as it is today (anthropic-version 2026-10-21, retired models),
through `tracelake replay` in-process, the real SDK over HTTP and a simulator that
refuses what today's API refuses: the plan comes first, the run keeps to it."""

from __future__ import annotations

import json

import dagster as dg
import polars as pl
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.demo.registry import FOLDER as DEMO_CANDIDATES
from pipelines.simulator import running
from tests.replay.conftest import DAY, cli_env

RETIRED = "claude-sonnet-4-5-20250929"
SUBSTITUTE = "claude-sonnet-4-6"


@pytest.fixture
def env(recorded_day, sim, tmp_path, monkeypatch):
    """The CLI's environment (each test points it at a simulator of its own)."""
    return {**cli_env(recorded_day, sim, tmp_path, monkeypatch), "COLUMNS": "250"}


def add_v4_copy(recorded_day, slug: str) -> None:
    """support-answer-v4 under another id, its prompt signed with the id: requests no other test sent."""
    text = (DEMO_CANDIDATES / "support-answer-v4.yaml").read_text()
    text = text.replace("id: support-answer-v4", f"id: {slug}").replace("Cite the ids you used.", f"Cite ids ({slug}).")
    recorded_day.add_candidate(slug, text)


def test_a_day_recorded_on_a_retired_model_with_temperature_replays_on_its_substitute(recorded_day, env):
    add_v4_copy(recorded_day, "today-v4")
    warehouse = recorded_day.settings.warehouse()
    recorded = warehouse.read("calls", pl.col("service") == "support.answer").to_dicts()
    asked = [json.loads(c["request_json"]) for c in recorded if c["request_json"]]
    assert {b["model"] for b in asked} == {RETIRED} and all("temperature" in b for b in asked)  # as the demo records

    with running() as sim:  # today's API: refuses temperature under 2026-10-21, 404 for the retired model
        result = CliRunner().invoke(
            app, ["replay", "--candidate", "today-v4", "--date", DAY.isoformat()], env={**env, **sim.env()}
        )
        bills = sim.bills
        refused = [r for r in sim.log if r.status >= 400]
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())

    # the plan is printed before the run, and names the substitution, the dropped parameters and the cost
    plan_at = output.index("replay plan for today-v4")
    assert plan_at < output.index("today-v4 on 2026-11-20: diff replay")
    assert f"retired: {RETIRED} (retired 2026-11-30, anthropic SDK 2.14.0) -> replayed on {SUBSTITUTE}" in output
    assert f"on {SUBSTITUTE} (api_2026_10_21_refuses_sampling)" in output and "dropped: temperature from" in output
    assert "cost: up to $" in output and "without cache reads" in output

    # 0 requests refused: not a 400, not a 404, not an errored batch entry
    assert refused == []
    instance = dg.DagsterInstance.from_config(env["DAGSTER_HOME"])
    [run] = instance.get_runs()
    ledger = warehouse.read("llm_requests", pl.col("run_id") == run.run_id)
    assert ledger.height > 0 and set(ledger["status"]) == {"succeeded"}
    # the ledger's request count equals the simulator's (each request billed once)
    assert ledger.height == len(bills) and ledger["cost_usd"].sum() == pytest.approx(sum(b.cost_usd for b in bills))
    assert {b.model for b in bills} == {SUBSTITUTE, "claude-haiku-4-5-20251001"}  # replays on the substitute; judge
    replayed = ledger.filter(pl.col("purpose") == "replay")
    assert set(replayed["substituted_from"]) == {RETIRED} and set(replayed["model"]) == {SUBSTITUTE}
    assert all(json.loads(j) == {"temperature": "api_2026_10_21_refuses_sampling"} for j in replayed["dropped_json"])

    # every row carries substituted_from; baselines re-ran on the substitute: a same-model control
    rows = warehouse.read("replays", pl.col("candidate") == "today-v4").to_dicts()
    sent = [r for r in rows if r["fidelity"] != "ineligible"]
    assert sent and all(r["substituted_from"] == RETIRED for r in sent)
    assert all(r["old_source"] == "baseline" and r["old_model"] == SUBSTITUTE == r["new_model"] for r in sent)
    assert all({"model_substituted", "parameters_dropped"} <= set(r["fidelity_reasons"]) for r in sent)
    summary = warehouse.read("replay_summary", pl.col("candidate") == "today-v4")
    assert set(summary.filter(pl.col("fidelity") != "ineligible")["model_basis"]) == {"substituted"}

    # the plan is run metadata too: tags on the run, an observation of the partition in the UI
    assert run.tags["tracelake/plan_substitutions"] == f"{RETIRED} -> {SUBSTITUTE}"
    assert float(run.tags["tracelake/plan_usd_upper"]) > 0
    observed = instance.fetch_observations(dg.AssetKey("replays"), limit=5).records
    assert observed and "retired: " in observed[0].asset_observation.metadata["plan"].value


def test_a_plan_over_budget_stops_before_sending_and_says_what_to_set(recorded_day, env):
    add_v4_copy(recorded_day, "costly-v4")
    with running() as sim:
        over = {**env, **sim.env(), "TRACELAKE_LLM_BUDGET_USD": "0.001"}
        planned = CliRunner().invoke(
            app, ["replay", "--candidate", "costly-v4", "--date", DAY.isoformat(), "--plan"], env=over
        )
        ran = CliRunner().invoke(app, ["replay", "--candidate", "costly-v4", "--date", DAY.isoformat()], env=over)
        assert sim.log == []  # neither sent anything
    assert planned.exit_code == 3 and ran.exit_code == 1
    for output in (planned.output, ran.output):
        text = " ".join(output.split())
        assert "over the budget of $0.0010" in text and "set TRACELAKE_LLM_BUDGET_USD to at least" in text
    assert recorded_day.settings.warehouse().read("replays", pl.col("candidate") == "costly-v4").is_empty()


def test_a_retired_model_without_a_substitute_stops_the_run_before_sending(recorded_day, env, tmp_path):
    add_v4_copy(recorded_day, "unmapped-v4")
    deployment = tmp_path / "lifecycle.yaml"
    deployment.write_text(f"version: 1\nmodels:\n  - {{model: {RETIRED}}}\n")  # this deployment maps it to nothing
    with running() as sim:
        mapped_off = {**env, **sim.env(), "TRACELAKE_MODEL_LIFECYCLE": str(deployment)}
        result = CliRunner().invoke(
            app, ["replay", "--candidate", "unmapped-v4", "--date", DAY.isoformat()], env=mapped_off
        )
        assert sim.log == []
    text = " ".join(result.output.split())
    assert result.exit_code == 1
    assert "STOP: " in text and f"recorded on {RETIRED}, retired on 2026-11-30" in text
    assert f"add '- {{model: {RETIRED}, substitute: <a served model>}}'" in text
