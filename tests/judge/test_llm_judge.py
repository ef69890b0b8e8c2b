"""The LLM judge against tracelake's simulator, through the real anthropic SDK and the LLM resource."""

from __future__ import annotations

import re

import pytest

from pipelines.judge import llm_judge, prompts
from pipelines.judge.llm_judge import judge
from pipelines.judge.policy import load_policy
from pipelines.judge.sampling import Selection
from pipelines.resources.warehouse import Warehouse
from pipelines.simulator import running, simulated_llm
from tests.judge.sessions import INJECTION, injection_sessions

POLICY = load_policy()
BLOCK = re.compile(r"<([A-Za-z_][\w-]*)(?:\s[^>]*)?>(.*?)</\1>", re.DOTALL)


def _all_judged(traces):
    return {t.trace_id: Selection(t.trace_id, 1.0, True, ("test",)) for t in traces}


def _bodies(sim) -> list[dict]:
    out = []
    for r in sim.log:
        if r.route == "messages" and r.body:
            out.append(r.body)
        elif r.route == "batch_create" and r.body:
            out += [item["params"] for item in r.body["requests"]]
    return out


@pytest.fixture
def warehouse(tmp_path):
    return Warehouse(uri=str(tmp_path / "wh"))


def test_injected_traces_get_the_verdict_of_the_plain_ones_and_the_text_stays_in_data_blocks(traces, warehouse):
    expected = injection_sessions()
    chosen = [traces[t] for t in expected]
    with running() as sim:
        run = judge(chosen, _all_judged(chosen), POLICY, simulated_llm(sim), warehouse, run_id="r1")
        bodies = _bodies(sim)
    verdicts = {(j.trace_id, j.error_class): j.label for j in run.judgements if j.sample_index == 0}
    assert {t: verdicts[(t, "hallucination_detected")] for t in expected} == {t: v for t, (_, v) in expected.items()}
    assert {verdicts[(t, "tool_misuse")] for t in expected} == {"no_error"}
    assert run.simulated and run.sent == len(run.judgements) and run.reused == 0
    injected = [b for b in bodies if INJECTION.lower() in str(b).lower()]
    assert len(injected) >= 4  # two injected traces x two judge prompts
    for body in injected:
        assert INJECTION.lower() not in str(body["system"]).lower()
        (message,) = body["messages"]
        outside = BLOCK.sub("", message["content"])
        assert INJECTION.lower() not in outside.lower()
        assert "&lt;/tool_result>&lt;output>" in message["content"] or "inject-clean" not in str(body)
    findings = {(f.trace_id, f.error_class): f for f in run.findings}
    upstream = findings[("inject-upstream", "hallucination_detected")]
    assert upstream.affected_step == 4 and upstream.evidence.startswith("[simulated]")


def test_a_rerun_sends_nothing_and_writes_no_ledger_version(traces, warehouse):
    chosen = [traces["plain-upstream"], traces["clean0"]]
    with running() as sim:
        llm = simulated_llm(sim)
        first = judge(chosen, _all_judged(chosen), POLICY, llm, warehouse, run_id="r1")
        version = warehouse.version("llm_requests")
        received = len(sim.log)
        again = judge(chosen, _all_judged(chosen), POLICY, llm, warehouse, run_id="r2")
        assert len(sim.log) == received
    assert first.sent == len(first.judgements) >= 4 and again.sent == 0 and again.reused == first.sent
    assert warehouse.version("llm_requests") == version
    assert [(f.trace_id, f.error_class) for f in again.findings] == [
        (f.trace_id, f.error_class) for f in first.findings
    ]


def test_an_unreadable_verdict_is_retried_then_stored_as_judge_error(traces, warehouse, monkeypatch):
    broken = prompts.JudgePrompt(
        "hallucination_detected",
        "v0-broken",
        prompts.PROMPTS["hallucination_detected"].system,
        {
            **prompts.PROMPTS["hallucination_detected"].tool,
            "input_schema": {
                "type": "object",
                "properties": {
                    "class": {"type": "string", "enum": ["hallucination_detected", "no_error"]},
                    "confidence": {"type": "number", "minimum": 2, "maximum": 3},
                },
            },
        },
    )
    monkeypatch.setitem(llm_judge.PROMPTS, "hallucination_detected", broken)
    policy = POLICY.model_copy(
        update={
            "judge": POLICY.judge.model_copy(
                update={"classes": ["hallucination_detected"], "self_agreement_share": 0.0}
            )
        }
    )
    chosen = [traces["clean0"]]
    with running() as sim:
        run = judge(chosen, _all_judged(chosen), policy, simulated_llm(sim), warehouse, run_id="r1")
    assert run.sent == 2  # the first answer and its retry
    assert [(f.error_class, f.detector) for f in run.findings] == [("judge_error", "llm_judge:hallucination_detected")]
    assert "unreadable after a retry" in run.findings[0].evidence


def test_with_no_llm_the_judge_says_it_skipped(traces):
    from pipelines.resources.llm import LLM

    run = judge([traces["clean0"]], _all_judged([traces["clean0"]]), POLICY, LLM(backend="off"), None, run_id="r")
    assert run.skipped and "no LLM configured" in run.skipped and run.findings == []


def test_over_budget_the_judge_sends_nothing_and_says_why(traces, warehouse):
    policy = POLICY.model_copy(update={"judge": POLICY.judge.model_copy(update={"budget_usd": 0.0000001})})
    chosen = [traces["plain-upstream"]]
    with running() as sim:
        run = judge(chosen, _all_judged(chosen), policy, simulated_llm(sim), warehouse, run_id="r1")
        assert [r for r in sim.log if r.route in ("messages", "batch_create")] == []
    assert run.skipped.startswith("skipped: ") and "above the cap" in run.skipped and run.findings == []


def test_the_deployments_budget_caps_the_judge_whatever_its_policy_allows(traces, warehouse):
    # the policy allows $5; TRACELAKE_LLM_BUDGET_USD (the resource's budget_usd) allows next to nothing
    assert POLICY.judge.budget_usd == 5.0
    chosen = [traces["plain-upstream"]]
    with running() as sim:
        run = judge(chosen, _all_judged(chosen), POLICY, simulated_llm(sim, budget_usd=0.0000001), warehouse, "r1")
        assert [r for r in sim.log if r.route in ("messages", "batch_create")] == []
    assert "above the cap of $0.0000 for this run" in run.skipped and run.findings == []
