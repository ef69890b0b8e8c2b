"""The replay job under faults: 20% of the simulator's HTTP answers are
429/529/500, 10% of batch entries error, a batch expires (timeouts of direct
requests: tests/llm/test_ledger.py). The run completes, every sampled
call ends with an answer or a recorded terminal error, and the ledger matches
what the simulator itself received and billed."""

from __future__ import annotations

import json

import polars as pl
import pytest

from pipelines.demo.registry import FOLDER as DEMO_CANDIDATES
from pipelines.simulator import Faults, running

SLUG = "v4-under-faults"


def test_a_replay_under_faults_completes_and_the_ledger_matches_the_simulator(recorded_day):
    v4 = (DEMO_CANDIDATES / "support-answer-v4.yaml").read_text().replace("id: support-answer-v4", f"id: {SLUG}")
    recorded_day.add_candidate(SLUG, v4)
    faults = Faults(rate=0.2, timeout_rate=0.1, timeout_seconds=1.0, expire_batches=1, batch_error_rate=0.1, seed=9)
    with running(faults=faults) as sim:
        result = recorded_day.replay(sim, SLUG, timeout_seconds=0.5, max_retries=8)
    assert result.success
    assert any(r.fault for r in sim.log)  # HTTP errors on the batch routes, retried by the SDK
    assert sim.faults.expire_batches == 0  # the expiring batch happened (its entries went into another)

    warehouse = recorded_day.settings.warehouse()
    rows = warehouse.read("replays", pl.col("candidate") == SLUG).to_dicts()
    sent = [r for r in rows if r["fidelity"] != "ineligible"]
    assert sent and all(r["status"] in ("succeeded", "errored", "expired") for r in sent)
    assert all(r["error"] for r in sent if r["status"] != "succeeded")
    assert all(r["verdict"] is not None for r in sent)

    # this run's requests: the candidate's, their paired baselines and the judge's
    ledger = warehouse.read("llm_requests", pl.col("run_id") == result.run_id)
    assert ledger["attempts"].max() >= 2  # errored and expired entries were submitted again
    created = {r.batch_id: set(r.custom_ids) for r in sim.received("batch_create", 200)}
    assert set(ledger["batch_id"].drop_nulls()) <= set(created)
    for row in ledger.filter(pl.col("batch_id").is_not_null()).iter_rows(named=True):
        assert row["custom_id"] in created[row["batch_id"]]
    answered = ledger.filter(pl.col("status") == "succeeded")
    assert {json.loads(j)["id"] for j in answered["response_json"]} == {b.response_id for b in sim.bills}
    assert ledger["cost_usd"].sum() == pytest.approx(sim.billed_usd, abs=1e-6)
    # the replays' own rows carry the same cost: replay requests plus the judge's
    replay_cost = sum(r["cost_usd"] + r["judge_cost_usd"] for r in rows)
    assert replay_cost == pytest.approx(ledger["cost_usd"].sum(), abs=1e-5)
