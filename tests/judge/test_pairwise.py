"""The pairwise old-vs-new verdict replay uses, against the simulator through the real SDK."""

from __future__ import annotations

from pipelines.judge.pairwise import MODE, pairwise_requests, pairwise_verdict
from pipelines.resources.warehouse import Warehouse
from pipelines.simulator import running, simulated_llm

CALL = {
    "call_id": "c1",
    "messages": [
        {"role": "user", "parts": [{"type": "text", "text": "Onde está meu pedido A-100? Quero saber hoje."}]}
    ],
}
PORTUGUESE = "Seu pedido A-100 foi enviado e chega em 3 dias úteis."
ENGLISH = "Your order A-100 has shipped and arrives in 3 business days."


def _verdict(old, new, tmp_path, name):
    requests = pairwise_requests(CALL, old, new)
    with running() as sim:
        results = list(simulated_llm(sim).run(requests, Warehouse(uri=str(tmp_path / name)), run_id="r"))
    return requests, pairwise_verdict(results)


def test_both_orders_are_asked_and_the_better_new_output_is_an_improvement(tmp_path):
    requests, verdict = _verdict(ENGLISH, PORTUGUESE, tmp_path, "a")
    assert len(requests) == 2 and {r.mode for r in requests} == {MODE} and {r.purpose for r in requests} == {"judge"}
    contents = [r.body["messages"][0]["content"] for r in requests]
    assert contents[0] != contents[1]  # A and B swapped
    assert (verdict.verdict, verdict.decided_by, verdict.simulated) == ("improved", "both_orders", True)


def test_a_worse_new_output_is_a_regression_and_equal_ones_are_the_same(tmp_path):
    assert _verdict(PORTUGUESE, ENGLISH, tmp_path, "b")[1].verdict == "regressed"
    truncated = {"text": "Seu pedido A-100 foi", "stop_reason": "max_tokens"}
    assert _verdict(PORTUGUESE, truncated, tmp_path, "c")[1].verdict == "regressed"
    same = _verdict(PORTUGUESE, "Seu pedido A-100 chega em 3 dias úteis, foi enviado.", tmp_path, "d")[1]
    assert (same.verdict, same.decided_by) == ("same", "both_orders")


def test_the_listed_order_is_stable_but_varies_across_calls():
    firsts = set()
    for i in range(12):
        call = {**CALL, "call_id": f"c{i}"}
        one, two = pairwise_requests(call, ENGLISH, PORTUGUESE), pairwise_requests(call, ENGLISH, PORTUGUESE)
        assert [r.key for r in one] == [r.key for r in two]
        firsts.add(one[0].sample_index)
    assert firsts == {0, 1}
