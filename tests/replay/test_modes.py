"""Every replay mode through the real anthropic SDK against tracelake's simulator
over real HTTP, materialized as the Dagster assets run it, on a small recorded day."""

from __future__ import annotations

import json

import polars as pl
import pytest
from statsmodels.stats.proportion import proportion_confint

from pipelines.demo.registry import FOLDER as DEMO_CANDIDATES
from pipelines.record.canonical import request_sha256
from pipelines.simulator.behaviour import CANDIDATE_MARKER, FIXED_MODEL

COMPONENTS = {"template_changed", "document_changed", "document_missing", "model_alias_moved", "params_changed"}


def candidate_yaml(slug: str, modes: str, services: str, extra: str = "", per_stratum: int = 40) -> str:
    return (
        f"version: 1\nid: {slug}\ndescription: test candidate {slug}\n"
        f"applies_to: {{services: [{services}]}}\nmodes: [{modes}]\n"
        f"sample: {{per_stratum: {per_stratum}, class_rate_samples: 4, step_limit: 4}}\n{extra}"
    )


def replays_of(day, slug: str) -> pl.DataFrame:
    return day.settings.warehouse().read("replays", pl.col("candidate") == slug)


def latest_rot(day) -> dict[str, dict]:
    checks = day.settings.warehouse().read("rot_checks").sort("checked_at")
    return {r["call_id"]: r for r in checks.to_dicts()}


def _text(system) -> str:
    """A system prompt as text: the resource may send it as blocks (with cache_control)."""
    if isinstance(system, list):
        return "".join(block.get("text", "") for block in system)
    return system or ""


def as_recorded(body: dict) -> dict:
    """A body as received, without what the resource adds on the wire (cache_control, stream)."""
    out = {k: v for k, v in body.items() if k not in ("stream", "cache_control")}
    if isinstance(out.get("system"), list):
        out["system"] = _text(out["system"])
    if out.get("tools"):
        out["tools"] = [{k: v for k, v in t.items() if k != "cache_control"} for t in out["tools"]]
    return out


def sent_bodies(sim, since: int = 0) -> list[dict]:
    """Every Messages body the simulator received (directly or inside a batch)."""
    bodies = []
    for entry in sim.log[since:]:
        if entry.route == "messages" and entry.body:
            bodies.append(entry.body)
        elif entry.route == "batch_create" and entry.body:
            bodies.extend(r["params"] for r in entry.body.get("requests", []))
    return bodies


def test_capture_and_pinned_replay_send_the_recorded_request(recorded_day, sim):
    recorded_day.add_candidate("capture-pinned", candidate_yaml("capture-pinned", "capture, pinned", "support.answer"))
    before = len(sim.log)
    assert recorded_day.replay(sim, "capture-pinned").success
    rows = replays_of(recorded_day, "capture-pinned")
    calls = recorded_day.settings.warehouse().read("calls").to_dicts()
    by_call = {c["call_id"]: c for c in calls}
    capture = rows.filter(pl.col("mode") == "capture").to_dicts()
    pinned = rows.filter(pl.col("mode") == "pinned").to_dicts()
    assert len(capture) == len(pinned) == sum(c["service"] == "support.answer" for c in calls)

    for row in capture:
        if row["fidelity"] == "ineligible":
            continue
        recorded = json.loads(by_call[row["call_id"]]["request_json"])
        # the recorded request, on the retired model's substitute (the demo records on claude-sonnet-4-5-20250929)
        assert row["substituted_from"] == recorded["model"] == "claude-sonnet-4-5-20250929"
        assert row["request_sha256"] == request_sha256({**recorded, "model": "claude-sonnet-4-6"})
        assert row["old_source"] == "recorded_baseline" and "model_substituted" in row["fidelity_reasons"]
        assert row["status"] == "succeeded" and row["simulated"]
        assert set(row["divergence"]) <= {"output_text", "finish_reason", "tool_calls", "response_model"}
        assert "output_text" in row["divergence"]  # the simulator does not write what production wrote
    # pinned asks for temperature 0, which API version 2026-10-21 refuses: removed before sending, and said so
    asked = [r for r in pinned if r["fidelity"] != "ineligible"]
    pinned_keys = {r["request_key"] for r in asked}
    ledger = recorded_day.settings.warehouse().read("llm_requests", pl.col("request_key").is_in(sorted(pinned_keys)))
    assert ledger.height == len(pinned_keys)
    assert all(json.loads(j)["temperature"] == "api_2026_10_21_refuses_sampling" for j in ledger["dropped_json"])
    assert all("parameters_dropped" in r["fidelity_reasons"] for r in asked)
    sent = {request_sha256(b) for b in sent_bodies(sim, before)}
    assert set(ledger["sent_request_sha256"]) <= sent
    assert not [b for b in sent_bodies(sim, before) if {"temperature", "top_p", "top_k"} & set(b)]
    assert not [r for r in sim.log[before:] if r.status >= 400]  # nothing refused


def test_rotted_calls_replay_approximate_with_components_never_exact(recorded_day, sim):
    rows = replays_of(recorded_day, "capture-pinned")
    if rows.is_empty():
        test_capture_and_pinned_replay_send_the_recorded_request(recorded_day, sim)
        rows = replays_of(recorded_day, "capture-pinned")
    rot = latest_rot(recorded_day)
    rotted = [r for r in rows.to_dicts() if rot[r["call_id"]]["status"] == "rotted"]
    assert rotted, "the demo day has rotted support calls"
    for row in rotted:
        assert row["fidelity"] == "approximate"
        assert set(rot[row["call_id"]]["components"]) <= set(row["fidelity_reasons"])
        assert set(row["fidelity_reasons"]) & COMPONENTS
    # redacted demo calls hold placeholders: what is sent is not what was recorded, and the row says so
    assert all(
        "redacted_placeholders" in r["fidelity_reasons"] for r in rows.to_dicts() if r["fidelity"] != "ineligible"
    )
    assert "exact" not in set(rows["fidelity"])


def test_diff_replay_of_a_template_candidate_with_a_paired_baseline(recorded_day, sim):
    recorded_day.add_candidate("support-answer-v4")
    before = len(sim.log)
    result = recorded_day.replay(sim, "support-answer-v4")
    assert result.success
    rows = replays_of(recorded_day, "support-answer-v4").to_dicts()
    assert rows and {r["mode"] for r in rows} == {"diff"}
    sent = [r for r in rows if r["fidelity"] != "ineligible"]
    # the legacy path that logged no template version cannot be re-rendered: ineligible, and why
    for row in rows:
        if row["fidelity"] == "ineligible":
            assert row["fidelity_reasons"] == ["prompt_version"] and row["request_key"] is None
    bodies = sent_bodies(sim, before)
    replayed = [b for b in bodies if b.get("tool_choice", {}).get("name") != "record_verdict"]
    # one request per distinct candidate request (two calls can render the same one: sent once)
    assert sum(CANDIDATE_MARKER in _text(b.get("system")) for b in replayed) == len({r["request_key"] for r in sent})
    # re-rendered from the frozen ingredients: the recorded document texts, not today's rebuilt index
    calls = {c["call_id"]: c for c in recorded_day.settings.warehouse().read("calls").to_dicts()}
    sent_hashes = dict(
        recorded_day.settings.warehouse().read("llm_requests").select("request_key", "sent_request_sha256").iter_rows()
    )
    for row in sent:
        assert row["baseline_request_key"] and row["old_source"] == "baseline"
        assert row["baseline_request_key"] != row["request_key"]
        docs = calls[row["call_id"]]["retrieval"]["documents"]
        body = next(b for b in bodies if request_sha256(b) == sent_hashes[row["request_key"]])
        assert all(d["text"] in _text(body["system"]) for d in docs)
    # compared by the pairwise judge, in both orders, unless the outputs are identical
    pt = [r for r in sent if r["language"] == "pt-BR"]
    en = [r for r in sent if r["language"] == "en"]
    assert any(r["verdict"] == "improved" and r["decided_by"] == "pairwise_judge:both_orders" for r in pt)
    assert not any(r["verdict"] == "regressed" for r in pt)
    long_en = [r for r in en if r["new_finish_reason"] == "length"]
    assert long_en and all(
        r["verdict"] == "regressed" and r["decided_by"].startswith("pairwise_judge") for r in long_en
    )
    judged = [r for r in sent if r["decided_by"].startswith("pairwise_judge")]
    # two calls that render the same requests and got the same answers share their judge requests: billed once
    shared = [r for r in judged if r["judge_cost_usd"] == 0]
    billed = [r for r in judged if r["judge_cost_usd"] > 0]
    assert all(
        any((t["old_output"], t["new_output"]) == (r["old_output"], r["new_output"]) for t in billed) for r in shared
    )
    assert all(r["decided_by"] == "exact_match" for r in sent if r not in judged)
    ledger = recorded_day.settings.warehouse().read("llm_requests", pl.col("purpose") == "judge")
    ledger = ledger.filter(pl.col("candidate") == "support-answer-v4")
    assert ledger.height == 2 * len(billed)  # both orders of each judged pair
    assert ledger["cost_usd"].sum() == pytest.approx(sum(r["judge_cost_usd"] for r in judged), abs=1e-6)
    judge_bodies = [b for b in bodies if b.get("tool_choice", {}).get("name") == "record_verdict"]
    assert len(judge_bodies) == ledger.height

    summary = recorded_day.settings.warehouse().read("replay_summary", pl.col("candidate") == "support-answer-v4")
    assert set(summary["fidelity"]) <= {"approximate", "ineligible"}
    total = summary.filter((pl.col("segment_key") == "all") & (pl.col("fidelity") == "approximate")).to_dicts()[0]
    assert total["improved"] == sum(r["verdict"] == "improved" for r in sent)
    assert total["regressed"] == sum(r["verdict"] == "regressed" for r in sent)
    meta = result.asset_materializations_for_node("replay_summary")[0].metadata
    assert list(meta)[:3] == ["verdict", "hides_regression", "regressed_segments"]  # the decision first
    assert "segment_key" in [c.name for c in meta["day_segments"].schema.columns] and meta["simulated"].value is True
    assert meta["window_segments"].records and meta["day_segments"].records


def test_a_candidate_compared_by_signals_asks_no_judge(recorded_day, sim):
    v4 = (DEMO_CANDIDATES / "support-answer-v4.yaml").read_text()
    recorded_day.add_candidate(
        "v4-signals", v4.replace("id: support-answer-v4", "id: v4-signals") + "\ncomparison: signals\n"
    )
    before = len(sim.log)
    assert recorded_day.replay(sim, "v4-signals").success
    assert not [b for b in sent_bodies(sim, before) if b.get("tool_choice", {}).get("name") == "record_verdict"]
    rows = [r for r in replays_of(recorded_day, "v4-signals").to_dicts() if r["fidelity"] != "ineligible"]
    pt = [r for r in rows if r["language"] == "pt-BR"]
    long_en = [r for r in rows if r["language"] == "en" and r["new_finish_reason"] == "length"]
    assert any(r["verdict"] == "improved" and r["decided_by"] == "language" for r in pt)
    assert long_en and all(r["verdict"] == "regressed" and r["decided_by"] == "finish_reason" for r in long_en)
    assert all(r["judge_cost_usd"] == 0 for r in rows)


@pytest.mark.parametrize("slug", ["sonnet-next", "support-answer-v4"])
def test_a_rerun_of_a_replay_partition_sends_nothing_and_writes_no_version(recorded_day, sim, slug):
    recorded_day.add_candidate(slug)
    first = recorded_day.replay(sim, slug)
    assert first.success
    warehouse = recorded_day.settings.warehouse()
    versions = {t: warehouse.version(t) for t in ("replays", "replay_summary", "llm_requests", "llm_batches")}
    received = len(sim.log)
    result = recorded_day.replay(sim, slug)
    assert result.success
    assert len(sim.log) == received  # not one HTTP request: neither replays nor the judge
    assert {t: warehouse.version(t) for t in versions} == versions
    meta = result.asset_materializations_for_node("replays")[0].metadata
    assert meta["requests_sent"].value == 0 and meta["requests_reused"].value > 0
    # what this run spent (the ledger: nothing) apart from what the rows cost
    assert meta["this_run"].value.startswith("0 sent, $0.0000 spent; nothing committed")
    assert meta["spent_this_run_usd"].value == 0 and meta["cost_of_rows_usd"].value > 0
    before = first.asset_materializations_for_node("replays")[0]
    billed = warehouse.read("llm_requests", pl.col("run_id") == first.run_id)["cost_usd"].sum()
    assert before.metadata["spent_this_run_usd"].value == pytest.approx(billed, abs=1e-6)
    # the same content, the same data version: replay_summary's automation does not follow it
    assert (
        result.asset_materializations_for_node("replays")[0].tags["dagster/data_version"]
        == before.tags["dagster/data_version"]
    )
    rows = replays_of(recorded_day, slug).to_dicts()
    if slug == "sonnet-next":
        assert {r["new_model"] for r in rows if r["status"] == "succeeded"} == {FIXED_MODEL}


def test_class_rate_replay_samples_failures_with_a_wilson_interval(recorded_day, sim):
    text = candidate_yaml("failure-rates", "class_rate", "support.answer, support.triage", per_stratum=60)
    recorded_day.add_candidate("failure-rates", text)
    assert recorded_day.replay(sim, "failure-rates").success
    rows = replays_of(recorded_day, "failure-rates")
    assert not rows.is_empty(), "the demo day has truncated or thumbs-down calls"
    for _, samples in rows.group_by("call_id"):
        samples = samples.to_dicts()
        assert sorted(r["sample_index"] for r in samples) == [0, 1, 2, 3]
        known = [r["reproduced"] for r in samples if r["reproduced"] is not None]
        hits = sum(known)
        low, high = proportion_confint(hits, len(known), alpha=0.05, method="wilson")
        assert all(r["class_rate"] == pytest.approx(hits / len(known)) for r in samples)
        assert samples[0]["class_rate_low"] == pytest.approx(low) and samples[0]["class_rate_high"] == pytest.approx(
            high
        )
    # four samples of one request at production temperature: four requests, distinct keys
    assert rows["request_key"].n_unique() == rows.height


def test_state_replay_serves_recorded_tool_results_and_stops_at_the_limit(recorded_day, sim):
    text = candidate_yaml("agent-next", "state", "agent.orders", extra=f"model: {FIXED_MODEL}\n")
    recorded_day.add_candidate("agent-next", text)
    before = len(sim.log)
    assert recorded_day.replay(sim, "agent-next").success
    rows = replays_of(recorded_day, "agent-next").sort("session_id", "step").to_dicts()
    assert rows and {r["mode"] for r in rows} == {"state"}
    calls = recorded_day.settings.warehouse().read("calls", pl.col("service") == "agent.orders").to_dicts()
    recorded_results = {
        json.dumps(json.loads(p["content_json"]), sort_keys=True)
        for c in calls
        for m in c["messages"] or []
        for p in m["parts"] or []
        if p["type"] == "tool_result" and p["content_json"]
    } | {
        json.dumps(json.loads(t["result_json"]), sort_keys=True)
        for c in calls
        for t in c["tool_executions"] or []
        if t["result_json"]
    }
    served = []
    for body in sent_bodies(sim, before):
        for message in body["messages"]:
            if isinstance(message["content"], list):
                for block in message["content"]:
                    if block.get("type") == "tool_result":
                        content = block["content"]
                        value = json.loads(content) if isinstance(content, str) and content[:1] in "[{" else content
                        served.append(json.dumps(value, sort_keys=True))
    assert served and set(served) <= recorded_results  # no tool ran live: every result was recorded
    finals = [r for r in rows if r["stop_reason"] is not None]
    assert len({r["session_id"] for r in finals}) == len({r["session_id"] for r in rows})
    assert {r["stop_reason"] for r in finals} <= {"finished", "step_limit", "error"} | {
        r["stop_reason"] for r in finals if r["stop_reason"].startswith("no_recorded_result:")
    }
    assert max(r["step"] for r in rows) < 4
    assert all(r["new_model"] == FIXED_MODEL for r in rows if r["status"] == "succeeded")
    assert all(r["verdict"] is not None for r in finals)
