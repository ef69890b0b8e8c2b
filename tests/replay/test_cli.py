"""`tracelake replay`, `tracelake run replay` and `tracelake replay-report` in-process,
against the simulator over HTTP, with the environment pointing at a recorded day."""

from __future__ import annotations

import dagster as dg
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.cli.app import RUN_TAGS
from tests.replay.conftest import DAY, cli_env


@pytest.fixture
def env(recorded_day, sim, tmp_path, monkeypatch):
    return cli_env(recorded_day, sim, tmp_path, monkeypatch)


def test_replay_a_candidate_then_every_active_candidate_and_report(recorded_day, sim, env, tmp_path):
    recorded_day.add_candidate("sonnet-next")
    recorded_day.add_candidate("support-answer-v4")
    runner = CliRunner()
    result = runner.invoke(app, ["replay", "--candidate", "sonnet-next", "--date", DAY.isoformat()], env=env)
    assert result.exit_code == 0, result.output
    assert f"sonnet-next on {DAY}: diff replay" in result.output and "simulated LLM" in result.output
    assert (tmp_path / ".tracelake" / "reports" / "sonnet-next.png").read_bytes()[:4] == b"\x89PNG"
    # listed under the replay job in the UI: the job's runs carry the code location's tag
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster")) as instance:
        runs = instance.get_runs(dg.RunsFilter(job_name="replay"))
    assert runs and all(r.tags.get(".dagster/repository") == RUN_TAGS[".dagster/repository"] for r in runs)

    received = len(sim.log)
    result = runner.invoke(app, ["run", "replay", "--date", DAY.isoformat()], env=env)
    assert result.exit_code == 0, result.output
    assert f"support-answer-v4 on {DAY}" in result.output and f"sonnet-next on {DAY}" in result.output
    assert len(sim.log) > received  # v4 was new; sonnet-next's day was answered from the ledger

    plot = tmp_path / "v4.png"
    result = runner.invoke(app, ["replay-report", "--candidate", "support-answer-v4", "--plot", str(plot)], env=env)
    assert result.exit_code == 0, result.output
    assert "support.answer/pt-BR" in result.output and "replay cost for support-answer-v4: $" in result.output
    # the window view, as the UI shows it: verdict, pooled table, the four checks, cost per call
    flat = " ".join(result.output.split())
    assert "verdict:" in flat and f"support-answer-v4 over {DAY}..{DAY} (1 day), pooled: diff replay" in flat
    assert "aggregate_hides_a_segment_regression" in flat and "cost_over_the_candidates_budget" in flat
    assert "cost per call: candidate $" in flat and "vs baseline $" in flat
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_a_bad_candidate_id_is_refused_before_anything_runs(env, sim):
    received = len(sim.log)
    result = CliRunner().invoke(app, ["replay", "--candidate", "Bad,Slug", "--date", DAY.isoformat()], env=env)
    assert result.exit_code == 2
    assert "is not a slug" in " ".join(result.output.split())  # rich wraps long lines
    result = CliRunner().invoke(app, ["replay", "--candidate", "no-such-thing", "--date", DAY.isoformat()], env=env)
    assert result.exit_code == 2 and "no candidate 'no-such-thing'" in " ".join(result.output.split())
    assert len(sim.log) == received


def test_candidates_new_writes_a_minimal_valid_file_the_registry_lists(recorded_day, env):
    runner = CliRunner()
    result = runner.invoke(app, ["candidates", "new", "prompt-v9"], env=env)
    assert result.exit_code == 0, result.output
    written = recorded_day.registry / "prompt-v9.yaml"
    assert "budget_usd: 5.0" in written.read_text()
    listed = runner.invoke(app, ["candidates"], env=env)
    assert "prompt-v9" in listed.output and "rejected" not in listed.output.replace("prompt-v9", "")
    again = runner.invoke(app, ["candidates", "new", "prompt-v9"], env=env)
    assert again.exit_code == 1 and "exists" in again.output
    written.unlink()
    assert runner.invoke(app, ["candidates", "new", "Bad,Slug"], env=env).exit_code == 2
