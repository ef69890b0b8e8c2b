"""Message Batches at scale and under kill -9, through the real SDK against the simulator
over HTTP: what the simulator billed is what the ledger holds, and nothing is billed twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable

import polars as pl
import pytest

from pipelines.resources.llm import LLM
from pipelines.resources.warehouse import Warehouse
from pipelines.simulator import Faults, Simulator, running, simulated_llm
from tests.llm.conftest import provider_batches, requests

CHILD = """
import sys
from pipelines.resources.warehouse import Warehouse
from pipelines.simulator import simulated_llm
from tests.llm.conftest import requests
url, where, n, run_id, per_batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
llm = simulated_llm(url, max_batch_requests=per_batch)
list(llm.run(requests(n, mode="killed"), Warehouse(uri=where), run_id=run_id, batch=True))
"""


def start(sim: Simulator, warehouse: Warehouse, n: int, run_id: str, per_batch: int = 100_000) -> subprocess.Popen:
    """A run in its own process, sending ``requests(n, mode="killed")`` as batches."""
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, sim.url, warehouse.uri, str(n), run_id, str(per_batch)],
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )


def kill_when(process: subprocess.Popen, ready: Callable[[], bool], timeout: float = 120) -> None:
    """kill -9 the process as soon as ``ready()``; fails if it ended on its own first."""
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "the run never reached the kill point"
            time.sleep(0.01)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()


def held(sim: Simulator, point: str) -> bool:
    return any(r.fault == f"held_{point}" for r in sim.log)


def assert_billed_once(sim: Simulator, warehouse: Warehouse, keys: set[str]) -> None:
    """The simulator billed every request exactly once, and the ledger holds exactly those bills."""
    ledger = warehouse.read("llm_requests")
    billed = sim.billed_custom_ids()
    assert set(billed) == keys and set(billed.values()) == {1}  # no request billed twice
    assert ledger.height == len(keys) and set(ledger["request_key"]) == keys
    assert set(ledger["status"]) == {"succeeded"}
    assert ledger["cost_usd"].sum() == pytest.approx(sim.billed_usd, abs=1e-9)
    answered = {json.loads(j)["id"] for j in ledger["response_json"]}
    assert answered == {b.response_id for b in sim.bills}


POINTS = ("before_create", "after_create", "while_polling", "after_results")


@pytest.mark.parametrize("point", POINTS)
def test_a_run_killed_at_any_point_of_the_batch_path_is_finished_without_paying_twice(tmp_path, point):
    for attempt in range(5):
        assert_killed_run_finished_without_paying_twice(
            Warehouse(uri=str(tmp_path / f"{point}-{attempt}")), point, attempt
        )


def assert_killed_run_finished_without_paying_twice(warehouse: Warehouse, point: str, attempt: int, n: int = 6) -> None:
    """kill -9 a batch run at ``point``, run it again, and check the bill against the ledger."""
    keys = {r.key for r in requests(n, mode="killed")}
    holds = {"before_create": {"before_batch_create": 1.5}, "after_create": {"after_batch_create": 1.5}}
    with running(holds=holds.get(point, {}), batch_seconds=3600 if point == "while_polling" else 0) as sim:
        child = start(sim, warehouse, n, f"killed-{attempt}")
        if point in ("before_create", "after_create"):
            kill_when(child, lambda: held(sim, f"{point.split('_')[0]}_batch_create"))
            time.sleep(1.8)  # the hold ends with the client gone
            # before: the provider made nothing; after: it made (and bills) a batch the ledger never recorded
            assert len(sim.batch_ids) == (0 if point == "before_create" else 1)
            [ahead] = warehouse.read("llm_batches").to_dicts()
            assert ahead["state"] == "creating" and set(json.loads(ahead["request_keys_json"])) == keys
        elif point == "while_polling":
            kill_when(child, lambda: not provider_batches(warehouse).is_empty() and sim.received("batch_retrieve"))
            sim.end_batches()
        else:
            kill_when(child, lambda: warehouse.version("llm_requests") is not None)
        sim.holds.clear()
        results = list(simulated_llm(sim).run(requests(n, mode="killed"), warehouse, run_id=f"rerun-{attempt}"))
        assert {r.key for r in results} == keys and all(r.status == "succeeded" for r in results)
        assert len(sim.batch_ids) == 1  # one batch in all: the killed run's, adopted or resumed, or the re-run's
        assert_billed_once(sim, warehouse, keys)
        batches = provider_batches(warehouse).to_dicts()
        assert [b["state"] for b in batches] == ["ended"] and batches[0]["batch_id"] == sim.batch_ids[0]
        if point == "after_create":
            assert batches[0]["adopted"] and batches[0]["run_id"] == f"killed-{attempt}"
        assert Counter(warehouse.read("llm_batches")["state"])["creating"] == 0  # every write-ahead row settled


def test_120000_requests_split_under_both_limits_and_a_killed_run_resumes_them(tmp_path):
    n = 120_000
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    with running(batch_seconds=3600) as sim:
        child = start(sim, warehouse, n, "big")
        kill_when(child, lambda: len(sim.received("batch_create", 200)) == 2 and sim.received("batch_retrieve"), 300)
        sim.end_batches()
        created = sim.received("batch_create", 200)
        sizes = [len(json.dumps(c.body).encode()) for c in created]
        assert sorted(len(c.custom_ids) for c in created) == [20_000, 100_000]  # the request limit
        assert all(size < 256 * 1024 * 1024 for size in sizes)  # the byte limit
        results = list(simulated_llm(sim).run(requests(n, mode="killed"), warehouse, run_id="resumed"))
        assert len(sim.received("batch_create")) == 2  # resumed, not created again
        assert len(results) == n and {r.status for r in results} == {"succeeded"}
        keys = {r.key for r in results}
        billed = sim.billed_custom_ids()
        assert set(billed) == keys and set(billed.values()) == {1}
        ledger = warehouse.read("llm_requests", columns=["request_key", "batch_id", "cost_usd"])
        assert ledger.height == n and ledger["request_key"].n_unique() == n
        assert set(ledger["batch_id"]) == {c.batch_id for c in created}
        assert ledger["cost_usd"].sum() == pytest.approx(sim.billed_usd, rel=1e-9)
        assert set(provider_batches(warehouse)["state"]) == {"ended"}


def test_batches_are_split_by_bytes_as_well_as_by_count(warehouse):
    todo = requests(40, system="A policy line that makes every request about a kilobyte long. " * 16)
    with running(max_batch_bytes=12_000) as sim:  # an API whose byte limit ~10 of these requests fill
        results = list(simulated_llm(sim, max_batch_bytes=12_000).run(todo, warehouse, run_id="r"))
        created = sim.received("batch_create", 200)
        refused = [r for r in sim.log if r.status >= 400]
    assert len(results) == 40 and {r.status for r in results} == {"succeeded"}
    assert len(created) >= 4 and refused == []
    assert all(len(json.dumps(c.body).encode()) <= 12_000 for c in created)
    assert sum(len(c.custom_ids) for c in created) == 40
    rows = provider_batches(warehouse)
    assert (rows["request_bytes"] <= 12_000).all() and rows["request_count"].sum() == 40


def test_an_errored_result_is_retried_by_later_runs_up_to_a_cap_and_a_final_run_needs_no_key(monkeypatch, tmp_path):
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    todo = requests(3, mode="retried")
    once, always, fine = (r.key for r in todo)
    with running(faults=Faults(failing={once: 1, always: -1})) as sim:
        llm = simulated_llm(sim, batch_rounds=1, retry_runs=2)
        first = {r.key: r for r in llm.run(todo, warehouse, run_id="run-1")}
        second = {r.key: r for r in llm.run(todo, warehouse, run_id="run-2")}
        sent_by_run_2 = [k for c in sim.received("batch_create", 200)[1:] for k in c.custom_ids]
        received = len(sim.log)
        # a third run: everything is final in the ledger, so it needs neither a key nor the network
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        third = list(LLM(backend="api", base_url=sim.url, retry_runs=2).run(todo, warehouse, run_id="run-3"))
        off = list(LLM(backend="off", retry_runs=2).run(todo, warehouse, run_id="run-3"))
        assert len(sim.log) == received
    assert (first[once].status, first[always].status, first[fine].status) == ("errored", "errored", "succeeded")
    assert "overloaded_error" in first[once].error
    assert sorted(sent_by_run_2) == sorted([once, always])  # the success was not sent again
    assert (second[once].status, second[always].status) == ("succeeded", "errored") and second[fine].reused
    assert all(r.reused for r in third + off) and {r.status for r in third} == {"succeeded", "errored"}
    rows = {r["request_key"]: r for r in warehouse.read("llm_requests").to_dicts()}
    assert len(rows) == 3  # one row per request, updated in place
    assert (rows[once]["runs"], rows[always]["runs"], rows[fine]["runs"]) == (2, 2, 1)
    for key, outcomes in ((once, ["errored", "succeeded"]), (always, ["errored", "errored"]), (fine, ["succeeded"])):
        attempts = json.loads(rows[key]["attempts_json"])
        assert [a["status"] for a in attempts] == outcomes  # every attempt of every run, in order
        assert [a["run_id"] for a in attempts] == ["run-1", "run-2"][: len(outcomes)]
        assert all(a["via"].startswith("msgbatch_sim_") for a in attempts)


def test_a_batch_whose_results_are_past_the_download_window_is_sent_again(tmp_path):
    warehouse = Warehouse(uri=str(tmp_path / "warehouse"))
    with running(batch_seconds=3600) as sim:
        child = start(sim, warehouse, 4, "forgotten")
        kill_when(child, lambda: not provider_batches(warehouse).is_empty() and sim.received("batch_retrieve"))
        sim.end_batches()
        sim.batch_seconds = 0  # batches created from now on end at once
        sim.advance(days=30)  # nobody came back for 30 days: the results are gone (billed all the same)
        results = list(simulated_llm(sim).run(requests(4, mode="killed"), warehouse, run_id="month-later"))
        first, second = sim.batch_ids
        gone = sim.received("batch_results")
    assert all(r.status == "succeeded" and r.batch_id == second for r in results)
    assert not [g for g in gone if g.batch_id == first and g.status == 200]
    states = dict(provider_batches(warehouse).select("batch_id", "state").iter_rows())
    assert states == {first: "results_expired", second: "ended"}
    for row in warehouse.read("llm_requests").to_dicts():
        assert [a["via"] for a in json.loads(row["attempts_json"])] == [first, second]
    # both batches were billed; the ledger says which one's results were lost
    assert len(sim.bills) == 8 and Counter(b.batch_id for b in sim.bills) == {first: 4, second: 4}


def test_one_budget_per_run_across_rounds_and_stages(sim, warehouse):
    from pipelines.llm.request import BudgetExceeded

    replay_round = requests(10, mode="diff")
    judge_round = requests(10, mode="judge")
    llm = simulated_llm(sim)
    one_round = llm.estimate(replay_round, warehouse).usd
    capped = simulated_llm(sim, budget_usd=one_round * 1.02)  # TRACELAKE_LLM_BUDGET_USD: room for one round
    sent = list(capped.run(replay_round, warehouse, run_id="nightly-1"))
    received = len(sim.log)
    # the judge's own, larger cap (its policy's $5) does not lift the run's; and the run has spent already
    with pytest.raises(BudgetExceeded) as over:
        list(capped.run(judge_round, warehouse, run_id="nightly-1", budget_usd=5.0))
    assert len(sim.log) == received
    message = str(over.value)
    assert "already spent" in message and f"${sum(r.cost_usd for r in sent):.4f}" in message
    assert f"cap of ${one_round * 1.02:.4f} for this run" in message
    # another run starts from nothing spent
    assert len(list(capped.run(judge_round, warehouse, run_id="nightly-2", budget_usd=5.0))) == 10


def test_a_model_missing_from_the_price_table_is_priced_at_the_most_expensive_row(sim, warehouse):
    from pipelines.llm.pricing import most_expensive, price

    unknown = requests(3, mode="m", model="claude-nova-1")
    top = most_expensive()
    assert not price("claude-nova-1").known and top.output >= 75.0
    estimate = simulated_llm(sim).estimate(unknown, warehouse)
    sonnet = simulated_llm(sim).estimate(requests(3, mode="m", model="claude-sonnet-4-6"), warehouse)
    assert estimate.usd >= 5 * sonnet.usd  # not priced as Sonnet
    results = list(simulated_llm(sim).run(unknown, warehouse, run_id="r"))
    assert sum(r.cost_usd for r in results) == pytest.approx(sim.billed_usd) and sim.billed_usd > 0
    assert sum(r.cost_usd for r in results) <= estimate.usd
    ledger = warehouse.read("llm_requests", pl.col("mode") == "m")
    assert ledger.height == 3


def test_a_resumed_batch_leaves_the_rows_its_own_run_recorded_as_they_are(sim, warehouse):
    """Two replay runs of one candidate (two days) share a request: the second finishes the
    first's open batch instead of sending it again, and records the batch's other results only
    where nobody has (CI found them written over the first run's rows as ``unclaimed``, losing
    the call, the parameters dropped and the API version they were sent under)."""
    from pipelines.llm.ledger import with_state

    first_day, llm = requests(6, mode="diff"), simulated_llm(sim)
    list(llm.run(first_day, warehouse, run_id="day-1", batch=True))
    recorded = warehouse.read("llm_requests").sort("request_key")
    # as the first run is while recording its results, in chunks (or was killed there): four of six in,
    # its batch not yet marked ended
    [batch] = provider_batches(warehouse).to_dicts()
    warehouse.merge("llm_batches", [with_state(batch, "in_progress")])
    shared, missing = first_day[0].key, first_day[-1].key
    warehouse.delete("llm_requests", pl.col("request_key").is_in([shared, missing]))

    second_day = [*first_day[:1], *requests(8, mode="diff")[6:]]  # one request in common, two new
    results = list(llm.run(second_day, warehouse, run_id="day-2", batch=True))
    assert {r.key for r in results} == {r.key for r in second_day} and all(r.status == "succeeded" for r in results)
    billed = sim.billed_custom_ids()
    assert set(billed.values()) == {1} and len(billed) == 8, "the shared request was not sent again"
    after = warehouse.read("llm_requests").sort("request_key")
    columns = ["request_key", "purpose", "mode", "call_id", "api_version", "sent_request_sha256", "dropped_json"]
    others = pl.col("request_key").is_in([r.key for r in first_day[1:-1]])  # not shared, recorded
    assert after.filter(others).select(columns).equals(recorded.filter(others).select(columns))
    # the shared request is the second run's now; the result nobody had recorded is recorded as what
    # it is: billed, asked for by no request of this run
    assert after.filter(pl.col("request_key") == shared)["run_id"].to_list() == ["day-2"]
    assert after.filter(pl.col("request_key") == missing)["purpose"].to_list() == ["unclaimed"]
    assert after.height == 8 and after["request_key"].n_unique() == 8
