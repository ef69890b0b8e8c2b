"""`tracelake find | show | diff | siblings | promote` on an ingested demo day, output asserted."""

from __future__ import annotations

import json
import re

import polars as pl

from tests.debug.conftest import BAD_ANSWER, DAY, PLANTED_DOC, TWIN_ANSWER, TWIN_TRACE


def test_find_lists_the_users_traces_newest_first(run, demo_day):
    traces = demo_day.warehouse().read("traces").filter(pl.col("user_id") == demo_day.user_id)
    output = run("find", "--user-id", demo_day.user_id, "--from", f"{DAY}T00:00", "--to", f"{DAY}T23:59:59")
    lines = [line for line in output.splitlines() if line.startswith(str(DAY))]
    assert len(lines) == traces.height
    assert lines == sorted(lines, reverse=True)
    bad_line = next(line for line in lines if demo_day.bad_trace_id in line)
    assert "support.answer" in bad_line and " v3 " in bad_line and "down" in bad_line
    assert f"{traces.height} trace(s)" in output

    # the window and the service narrow it
    started = traces.filter(pl.col("trace_id") == demo_day.bad_trace_id)["started_at"][0]
    narrow = run(
        "find", "--user-id", demo_day.user_id, "--from", f"{started:%Y-%m-%dT%H:%M}", "--to",
        f"{started:%Y-%m-%dT%H}:59:59", "--service", "support.answer",
    )  # fmt: skip
    assert demo_day.bad_trace_id in narrow
    assert all("support.answer" in line for line in narrow.splitlines() if line.startswith(str(DAY)))
    assert "no traces" in run("find", "--user-id", "nobody", "--from", f"{DAY}", "--to", f"{DAY}T23:00")
    assert "not a time" in run("find", "--user-id", "x", "--from", "yesterday", "--to", f"{DAY}", code=2)


def test_show_a_support_call_step_by_step(run, demo_day):
    output = run("show", demo_day.bad_trace_id)
    assert f"trace {demo_day.bad_trace_id}" in output
    assert "step  0  llm call  claude-sonnet" in output
    assert "finish  stop (end_turn)" in output
    assert PLANTED_DOC in output and "retrieved" in output  # doc ids with scores
    assert BAD_ANSWER[:40] in output
    assert "feedback  thumbs=down" in output
    assert "<PERSON_1>" in output or "<EMAIL_ADDRESS_1>" in output  # placeholders shown as such


def test_show_an_agent_session_marks_the_first_violation_and_findings(run, demo_day):
    output = run("show", demo_day.agent_trace_id)
    lines = output.splitlines()
    step4 = next(line for line in lines if line.startswith("step  4"))
    assert "<<< FIRST VIOLATION" in step4
    assert sum("<<< FIRST VIOLATION" in line for line in lines) == 1
    assert "state violation: result_without_call" in output
    assert "state violation: results_out_of_order" in output
    step7 = output[output.index("step  7") :]
    assert "semantic error: upstream_data_missing by empty_tool_result_then_claim@1 confidence 0.90 (caused at" in step7
    assert "tool call  lookup_order" in output and "arguments:" in output and "result:" in output
    assert "session end" in output
    assert "error: no trace 'nope'" in run("show", "nope", code=1)


def test_diff_two_calls_block_by_block(run, demo_day):
    from pipelines.debug.siblings import find_siblings
    from pipelines.debug.tables import read_call

    warehouse = demo_day.warehouse()
    good = find_siblings(warehouse, read_call(warehouse, demo_day.bad_call_id))[0].call
    output = run("diff", demo_day.bad_call_id, good["call_id"])
    rows = {line.split("│")[1].strip(): line for line in output.splitlines() if line.count("│") >= 6}
    assert "same" in rows["model"] and "same" in rows["params"]
    assert "changed" in rows["system"]
    assert f"document:{PLANTED_DOC}" in rows and "only A" in rows[f"document:{PLANTED_DOC}"]
    assert f"+++ document:{PLANTED_DOC} (B)" not in output and f"--- document:{PLANTED_DOC} (A)" in output
    assert "Internal note" in output  # the moved block's text, diffed


def test_diff_two_traces_names_the_first_divergent_step(run, demo_day):
    output = run("diff", demo_day.twin_of, TWIN_TRACE)
    assert "first divergence after 3 identical step(s): A step 4 (llm call" in output
    only_a = [line for line in output.splitlines() if line.startswith("  only A:")]
    only_b = [line for line in output.splitlines() if line.startswith("  only B:")]
    assert any("tool_call issue_refund" in line for line in only_a)
    assert any(TWIN_ANSWER in line for line in only_b)
    assert "same decisions at every step" in run("diff", TWIN_TRACE, TWIN_TRACE)


def test_siblings_ranks_known_good_calls_and_lists_differences(run, demo_day):
    output = run("siblings", demo_day.bad_call_id)
    best = next(line for line in output.splitlines() if line.startswith("best sibling"))
    count = int(best.split(":")[1].split()[0])
    assert 1 <= count <= 12
    numbered = [line.strip() for line in output.splitlines() if re.match(r"\s+\d+\. ", line)]
    assert len(numbered) == count
    assert any(f"{PLANTED_DOC} (bad)" in line for line in numbered)
    good_id = best.split()[2].rstrip(":")
    good = demo_day.warehouse().read("calls").filter(pl.col("call_id") == good_id).row(0, named=True)
    assert good["status"] == "ok" and not good["feedback"]
    assert good["template_version"] == "v3" and good["service"] == "support.answer"
    assert json.loads(good["template_variables_json"])["language_name"] == "Brazilian Portuguese"
