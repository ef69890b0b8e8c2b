"""`tracelake siblings` then `tracelake ablate` on the simulator (real SDK over HTTP):
the planted stale document comes out as the cause; `replay` and `promote` on the same call."""

from __future__ import annotations

import re

import polars as pl
import pytest

from pipelines.simulator import running
from tests.debug.conftest import PLANTED_DOC


@pytest.fixture(scope="module")
def simulator():
    with running() as sim:
        yield sim


@pytest.fixture(autouse=True)
def llm_env(simulator, monkeypatch):
    monkeypatch.setenv("TRACELAKE_LLM", "simulator")
    monkeypatch.setenv("TRACELAKE_LLM_URL", simulator.url)


def _best_sibling(output: str) -> tuple[str, list[str]]:
    best = next(line for line in output.splitlines() if line.startswith("best sibling"))
    numbered = [line.strip() for line in output.splitlines() if re.match(r"\s+\d+\. ", line)]
    return best.split()[2].rstrip(":"), numbered


def test_ablate_names_the_planted_document(run, demo_day, simulator):
    good_id, differences = _best_sibling(run("siblings", demo_day.bad_call_id))
    assert 1 <= len(differences) <= 12
    planted = next(d for d in differences if PLANTED_DOC in d)
    planted_number = int(planted.split(".")[0])

    output = run("ablate", demo_day.bad_call_id, "--against", good_id, "--n", "10")
    assert "failure = language_mismatch" in output
    cause = next(line for line in output.splitlines() if line.startswith("cause:"))
    assert f"cause: #{planted_number} retrieved document at rank" in cause and PLANTED_DOC in cause
    assert "(simulated: tracelake's simulator, not a model)" in output

    rows = demo_day.warehouse().read("ablations").filter(pl.col("bad_call_id") == demo_day.bad_call_id)
    assert rows.height == 2 * (len(differences) + 1)
    assert set(rows["samples"].to_list()) == {10} and rows["simulated"].all()
    bad_side = rows.filter(pl.col("applied_to") == "bad").sort("failure_rate")
    good_side = rows.filter(pl.col("applied_to") == "good").sort("failure_rate", descending=True)
    # reversing the planted document removes the most failures; introducing it adds the most
    assert bad_side["difference_index"][0] == planted_number
    assert good_side["difference_index"][0] == planted_number
    assert good_side["failure_rate"][0] == 1.0 and bad_side["failure_rate"][0] < 0.8
    baseline = rows.filter((pl.col("applied_to") == "bad") & (pl.col("difference_index") == 0)).row(0, named=True)
    assert baseline["failure_rate"] == 1.0 and baseline["ci_low"] > 0.6 and baseline["ci_high"] == pytest.approx(1.0)

    # a re-run sends nothing and writes no new Delta version
    version = demo_day.warehouse().version("ablations")
    sent_before = len(simulator.log)
    again = run("ablate", demo_day.bad_call_id, "--against", good_id, "--n", "10")
    assert "LLM: 0 request(s) sent" in again and len(simulator.log) == sent_before
    assert demo_day.warehouse().version("ablations") == version


def test_replay_one_call_with_fidelity_and_divergence(run, demo_day, simulator):
    output = run("replay", demo_day.bad_call_id, "--n", "4")
    # the demo redacts at ingest: the stored request holds placeholders, so the replay is approximate
    assert "fidelity: approximate (" in output and "redacted_placeholders" in output
    assert "mode class_rate, temperature 0.3" in output and "symptom language_mismatch" in output
    match = re.search(r"reproduced the symptom in (\d) of 4 sample\(s\)", output)
    assert match and int(match.group(1)) == 4  # the stale document makes every sample answer in English
    assert "output_text" in output  # the simulated answer's words differ from the recorded ones

    pinned = run("replay", demo_day.bad_call_id, "--pinned")
    assert "mode pinned, temperature 0" in pinned and "of 1 sample(s)" in pinned
    assert "no call 'nope'" in run("replay", "nope", code=1)


def test_promote_keeps_the_frozen_case(run, demo_day):
    output = run("promote", demo_day.bad_call_id, "--dataset", "support-language", "--note", "answered in English")
    assert "in dataset support-language (new): symptom language_mismatch" in output
    assert ".jsonl.gz line" in output
    again = run("promote", demo_day.bad_call_id, "--dataset", "support-language", "--note", "answered in English")
    assert "(unchanged)" in again
    warehouse = demo_day.warehouse()
    cases = warehouse.read("regression_cases")
    assert cases.height == 1
    case = cases.row(0, named=True)
    call = warehouse.read("calls").filter(pl.col("call_id") == demo_day.bad_call_id).row(0, named=True)
    assert case["request_json"] == call["request_json"] and case["bad_output_text"] == call["output_text"]
    assert case["note"] == "answered in English" and case["segment"]["language"] == "pt-BR"
    refused = run("promote", demo_day.bad_call_id, "--dataset", "Bad Name", "--note", "x", code=2)
    assert "dataset name 'Bad Name' should be" in refused

    # a dataset is calls a replay candidate can run against, with the frozen request
    from pipelines.debug.promote import dataset_calls
    from pipelines.replay.bodies import recorded_request, with_candidate
    from pipelines.replay.candidates import Candidate

    calls = dataset_calls(warehouse, "support-language")
    assert calls["call_id"].to_list() == [demo_day.bad_call_id]
    candidate = Candidate(id="sonnet-next", description="the next Sonnet", model="claude-sonnet-4-6-20261015")
    fixed = with_candidate(calls.row(0, named=True), recorded_request(calls.row(0, named=True)), candidate, None)
    assert fixed["model"] == "claude-sonnet-4-6-20261015" and fixed["messages"] == recorded_request(call)["messages"]
