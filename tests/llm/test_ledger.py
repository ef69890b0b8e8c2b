"""The LLM resource through the real SDK against the simulator over real HTTP:
content addressing, faults, resumed batches, the budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import polars as pl
import pytest

from pipelines.resources.llm import BudgetExceeded, LLMRequest
from pipelines.simulator import Faults, running, simulated_llm
from tests.llm.conftest import chat, provider_batches, requests


def provider_batches_or_none(warehouse) -> bool:
    """True while no provider batch has been recorded yet."""
    return warehouse.version("llm_batches") is None or provider_batches(warehouse).is_empty()


def versions(warehouse) -> tuple:
    return warehouse.version("llm_requests"), warehouse.version("llm_batches")


@pytest.mark.parametrize("batch", [False, True])
def test_rerun_sends_nothing_and_writes_nothing(sim, warehouse, batch):
    llm = simulated_llm(sim)
    todo = requests(6) + requests(6, mode="class_rate", temperature=0.7)
    first = list(llm.run(todo, warehouse, run_id="run-1", batch=batch))
    assert len(first) == 12 and all(r.status == "succeeded" and not r.reused and r.simulated for r in first)
    assert {r.key for r in first} == {r.key for r in todo}
    received, before = len(sim.log), versions(warehouse)

    ticks = []
    again = list(llm.run(todo, warehouse, run_id="run-2", batch=batch, progress=lambda d, t: ticks.append((d, t))))

    assert len(sim.log) == received  # 0 requests sent
    assert versions(warehouse) == before  # 0 new Delta versions
    assert all(r.reused for r in again) and ticks[-1] == (12, 12)
    assert {r.key: r.response for r in again} == {r.key: r.response for r in first}
    ledger = warehouse.read("llm_requests")
    assert ledger.height == 12 and ledger["simulated"].all()
    assert set(ledger["run_id"]) == {"run-1"}
    if batch:
        assert ledger["batch_id"].str.starts_with("msgbatch_sim_").all()


def test_faults_every_request_ends_and_the_ledger_matches_the_simulator(warehouse):
    faults = Faults(rate=0.2, timeout_rate=0.1, timeout_seconds=3.0, expire_batches=1, batch_error_rate=0.1, seed=3)
    with running(faults=faults) as sim:
        # The client's timeout is long enough that only the hang fault reaches it, even on a loaded
        # machine: a normal reply that arrived after the client gave up would be a billed answer
        # the client never saw, which the exact ledger-to-simulator comparisons below cannot hold.
        llm = simulated_llm(sim, timeout_seconds=1.2, max_retries=8)
        direct = requests(30, mode="direct")
        batched = requests(30, mode="batched")
        results = list(llm.run(direct, warehouse, run_id="r", batch=False))
        results += list(llm.run(batched, warehouse, run_id="r", batch=True))
    faulted = {r.fault for r in sim.log if r.fault}
    assert {"429", "529", "500", "timeout"} <= faulted  # every fault kind happened
    assert len(sim.received("batch_create", 200)) >= 2  # the expired entries went into a second batch

    # every request has a result or a recorded terminal error
    assert {r.key for r in results} == {r.key for r in direct + batched}
    assert all(r.status in ("succeeded", "errored", "expired") for r in results)
    assert all(r.error for r in results if r.status != "succeeded")
    ledger = warehouse.read("llm_requests")
    assert ledger.height == 60 and ledger["request_key"].n_unique() == 60

    # the ledger matches what the simulator received and billed
    one_by_one = ledger.filter(pl.col("mode") == "direct")
    assert (
        one_by_one["batch_id"].is_null().all()
        and ledger.filter(pl.col("mode") == "batched")["batch_id"].is_not_null().all()
    )
    answered = {json.loads(j)["id"] for j in one_by_one.filter(pl.col("status") == "succeeded")["response_json"]}
    assert answered == {r.response_id for r in sim.received("messages", 200)}
    assert one_by_one["attempts"].sum() == len(sim.received("messages"))  # faulted attempts counted too
    assert one_by_one["attempts"].max() > 1

    batches = provider_batches(warehouse)
    created = {r.batch_id: set(r.custom_ids) for r in sim.received("batch_create", 200)}
    assert set(batches["batch_id"]) == set(created) and (batches["state"] == "ended").all()
    in_batches = ledger.filter(pl.col("batch_id").is_not_null() & (pl.col("status") == "succeeded"))
    for row in in_batches.iter_rows(named=True):
        assert row["custom_id"] == row["request_key"] and row["custom_id"] in created[row["batch_id"]]
    assert in_batches["attempts"].max() >= 2  # an expired or errored entry was resubmitted
    assert ledger["cost_usd"].sum() == pytest.approx(sim.billed_usd, abs=1e-6)
    assert {b.response_id for b in sim.bills} == {
        json.loads(j)["id"] for j in ledger.filter(pl.col("status") == "succeeded")["response_json"]
    }


KILLED_RUN = """
import sys
from pipelines.resources.warehouse import Warehouse
from pipelines.simulator import simulated_llm
from tests.llm.conftest import chat, requests
llm = simulated_llm(sys.argv[1])
list(llm.run(requests(8), Warehouse(uri=sys.argv[2]), run_id="killed", batch=True))
"""


def test_a_run_killed_while_polling_resumes_its_batch(warehouse):
    with running(batch_seconds=3600) as sim:  # the batch stays in progress until end_batches()
        process = subprocess.Popen(
            [sys.executable, "-c", KILLED_RUN, sim.url, warehouse.uri],
            cwd=os.getcwd(),
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        try:
            deadline = time.monotonic() + 60
            while provider_batches_or_none(warehouse) or len(sim.received("batch_retrieve")) < 2:
                assert process.poll() is None, "the run ended before it was killed"
                assert time.monotonic() < deadline, "the run never persisted its batch"
                time.sleep(0.05)
        finally:
            process.kill()
            process.wait()
        [persisted] = provider_batches(warehouse).to_dicts()
        assert persisted["state"] == "in_progress" and persisted["run_id"] == "killed"
        assert warehouse.version("llm_requests") is None  # nothing came back before the kill

        sim.end_batches()
        results = list(simulated_llm(sim).run(requests(8), warehouse, run_id="rerun", batch=True))

    assert len(sim.received("batch_create")) == 1  # no second batch
    assert {r.batch_id for r in results} == {persisted["batch_id"]}
    assert all(r.status == "succeeded" for r in results) and len(results) == 8
    [ended] = provider_batches(warehouse).to_dicts()
    assert ended["batch_id"] == persisted["batch_id"] and ended["state"] == "ended" and ended["succeeded"] == 8


def test_a_budget_below_the_estimate_sends_nothing(sim, warehouse):
    llm = simulated_llm(sim)
    todo = requests(20)
    estimate = llm.estimate(todo, warehouse, batch=False)
    assert estimate.requests == 20 and estimate.usd > 0

    with pytest.raises(BudgetExceeded) as refused:
        list(llm.run(todo, warehouse, run_id="r", batch=False, budget_usd=estimate.usd / 2))
    assert f"${estimate.usd:.4f}" in str(refused.value) and "nothing was sent" in str(refused.value)
    assert sim.log == [] and versions(warehouse) == (None, None)

    results = list(llm.run(todo, warehouse, run_id="r", batch=False, budget_usd=estimate.usd))
    assert sum(r.cost_usd for r in results) <= estimate.usd  # the estimate is an upper bound
    assert llm.estimate(todo, warehouse).requests == 0  # stored requests cost nothing more


def test_a_batch_the_provider_no_longer_knows_is_sent_again(warehouse):
    import anthropic

    with running(batch_seconds=3600) as gone:

        def stop_once_persisted() -> None:  # the provider vanishes while the run polls
            while provider_batches_or_none(warehouse):
                time.sleep(0.02)
            gone.stop()

        stopper = threading.Thread(target=stop_once_persisted)
        stopper.start()
        with pytest.raises(anthropic.APIConnectionError):
            list(simulated_llm(gone, max_retries=0, poll_interval_seconds=0.02).run(requests(3), warehouse, run_id="a"))
        stopper.join()
    with running() as fresh:
        results = list(simulated_llm(fresh).run(requests(3), warehouse, run_id="b"))
    assert all(r.status == "succeeded" for r in results) and len(results) == 3
    states = dict(provider_batches(warehouse).select("run_id", "state").iter_rows())
    assert states == {"a": "not_found", "b": "ended"}
    assert len(fresh.received("batch_create", 200)) == 1


def test_batches_bill_half_of_the_same_usage_sent_directly(sim, warehouse):
    llm = simulated_llm(sim)
    [direct] = llm.run(requests(1, mode="direct"), warehouse, run_id="r", batch=False)
    [batched] = llm.run(requests(1, mode="batched"), warehouse, run_id="r", batch=True)
    assert direct.response["content"] == batched.response["content"]  # same body at temperature 0
    assert (direct.input_tokens, direct.output_tokens) == (batched.input_tokens, batched.output_tokens)
    assert batched.response["usage"]["service_tier"] == "batch" and batched.batch_id
    assert batched.cost_usd == pytest.approx(direct.cost_usd / 2) and direct.cost_usd > 0
    assert sim.billed_usd == pytest.approx(direct.cost_usd + batched.cost_usd)


def test_a_request_that_ran_out_of_retries_is_sent_again_by_the_next_run(warehouse):
    todo = requests(12, mode="retried")
    with running(faults=Faults(rate=0.6, seed=5)) as faulty:
        first = {r.key: r for r in simulated_llm(faulty, max_retries=0).run(todo, warehouse, run_id="r1", batch=False)}
    gave_up = {k for k, r in first.items() if r.status == "errored"}
    assert gave_up and len(gave_up) < len(todo)  # the seed fails some, not all
    assert all("529" in first[k].error or "429" in first[k].error or "500" in first[k].error for k in gave_up)

    with running() as clean:
        second = {r.key: r for r in simulated_llm(clean).run(todo, warehouse, run_id="r2", batch=False)}
        asked = {r.body["messages"][0]["content"] for r in clean.received("messages")}
        by_key = {r.key: r.body["messages"][0]["content"] for r in todo}
        assert asked == {by_key[k] for k in gave_up}  # only the failed ones went out again
        third = list(simulated_llm(clean).run(todo, warehouse, run_id="r3", batch=False))
        assert len(clean.log) == len(gave_up)  # and a third run sends nothing
    assert all(r.status == "succeeded" for r in second.values()) and all(r.reused for r in third)
    ledger = warehouse.read("llm_requests")
    assert ledger.height == len(todo) and (ledger["status"] == "succeeded").all()  # rows updated, not added
    assert set(ledger.filter(pl.col("request_key").is_in(sorted(gave_up)))["run_id"]) == {"r2"}


def test_a_request_the_provider_refuses_for_good_is_not_sent_again(sim, warehouse):
    bad = [LLMRequest(body={**chat(0), "messages": []}, purpose="replay", mode="refused")]
    first = list(simulated_llm(sim).run(bad, warehouse, run_id="r1", batch=False))
    assert first[0].status == "errored" and "invalid_request_error" in first[0].error
    received = len(sim.log)
    again = list(simulated_llm(sim).run(bad, warehouse, run_id="r2", batch=False))
    assert again[0].reused and len(sim.log) == received
