"""The judge stage as Dagster runs it: `tracelake run judge --date D` in-process, against the simulator
through the real SDK, then again with nothing new (0 requests, no new Delta version), then with the
LLM off; the README's queries; the alert sensor posting to a webhook on loopback."""

from __future__ import annotations

import dataclasses
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import dagster as dg
import polars as pl
import pytest

from assets.judge import judge_alerts
from pipelines.judge.events import LEADING
from pipelines.judge.queries import HOURLY_SQL, session_timeline_sql
from pipelines.record.schema import AGENT_EVENTS
from pipelines.resources.judge import AlertWebhook
from pipelines.simulator import running
from tests.environments import run_stage
from tests.judge.sessions import DAY, planted_sessions, violating_sessions

TABLES = ("agent_events", "semantic_errors", "state_violations", "judge_calibration", "llm_requests")
D = DAY.date().isoformat()


@pytest.fixture(scope="module")
def staged(ingested):
    """The judge stage run twice on the fixtures' day against one simulator."""
    with dg.instance_for_test() as instance, running() as sim:
        settings = dataclasses.replace(ingested, llm_backend="simulator", llm_base_url=sim.url)
        first = run_stage(settings, "judge", D, instance)
        warehouse = settings.warehouse()
        versions = {t: warehouse.version(t) for t in TABLES}
        received = len(sim.log)
        second = run_stage(settings, "judge", D, instance)
        yield {
            "settings": settings,
            "instance": instance,
            "first": first,
            "second": second,
            "versions": versions,
            "versions_after": {t: warehouse.version(t) for t in TABLES},
            "sent_first": received,
            "sent_second": len(sim.log) - received,
        }


def _metadata(result, key: str) -> dict:
    (m,) = [e.materialization for e in result.get_asset_materialization_events() if e.asset_key.path == [key]]
    return {k: v.value for k, v in m.metadata.items()}


def test_the_stage_writes_events_findings_and_violations(staged):
    assert staged["first"].success
    warehouse = staged["settings"].warehouse()
    events = warehouse.read("agent_events")
    assert events.columns[: len(LEADING)] == list(LEADING) and "parent_event_id" in events.columns
    assert pl.from_arrow(AGENT_EVENTS.empty_table()).schema == events.schema
    assert set(events["event_type"]) == {"session.start", "llm.call", "tool.invoke", "agent.think", "session.end"}
    spans = warehouse.read("spans")
    assert events.height == spans.height and events["event_key"].n_unique() == spans.height

    findings = warehouse.read("semantic_errors")
    heuristic = findings.filter(~pl.col("detector").str.starts_with("llm_judge:"))
    planted = {t: (c, s) for t, (_, c, s) in planted_sessions().items()}
    got = {
        r["trace_id"]: (r["error_class"], r["affected_step"]) for r in heuristic.to_dicts() if r["trace_id"] in planted
    }
    assert got == planted
    judged = findings.filter(pl.col("detector").str.starts_with("llm_judge:"))
    assert judged.height > 0 and judged["simulated"].all()
    assert findings["judged_with_probability"].is_between(0.0, 1.0, closed="right").all()

    violations = warehouse.read("state_violations").filter(pl.col("first_in_trace"))
    expected = {t: (c, s) for t, (_, c, s) in violating_sessions().items()}
    assert {r["trace_id"]: (r["code"], r["step_index"]) for r in violations.to_dicts()} == expected

    meta = _metadata(staged["first"], "semantic_errors")
    assert meta["judge"] == "simulated" and meta["judge_requests_sent"] > 0 and meta["judge_cost_usd"] > 0
    assert meta["unknown_models"] == ["acme-llm-7"]
    calibration = warehouse.read("judge_calibration")
    assert set(calibration["check"]) == {"self_agreement", "human_feedback"}
    assert calibration.filter(pl.col("check") == "self_agreement")["items"].sum() > 0


def test_a_rerun_sends_no_request_and_makes_no_delta_version(staged):
    assert staged["second"].success and staged["sent_first"] > 0
    assert staged["sent_second"] == 0
    assert staged["versions_after"] == staged["versions"]
    meta = _metadata(staged["second"], "semantic_errors")
    assert (
        meta["judge_requests_sent"] == 0
        and meta["judge_requests_reused"] == _metadata(staged["first"], "semantic_errors")["judge_requests_sent"]
    )


def test_the_readme_queries(staged):
    warehouse = staged["settings"].warehouse()
    context = pl.SQLContext({t: warehouse.scan(t) for t in ("agent_events", "semantic_errors")}, eager=True)
    timeline = context.execute(session_timeline_sql("s-tool-error-ignored"))
    assert timeline["step_index"].to_list() == list(range(7))
    assert timeline["tool_success"].to_list()[4] is False and timeline["event_type"][5] == "llm.call"
    hourly = context.execute(HOURLY_SQL)
    assert hourly.columns == ["hour", "sessions", "tokens", "cost_usd", "semantic_errors", "error_rate"]
    assert hourly["sessions"].sum() == warehouse.read("traces").height
    sessions_with_errors = warehouse.read("semantic_errors").filter(pl.col("is_error"))["trace_id"].n_unique()
    assert round((hourly["error_rate"] * hourly["sessions"]).sum()) == sessions_with_errors
    assert hourly["cost_usd"].sum() == pytest.approx(warehouse.read("calls")["usage"].struct.field("cost_usd").sum())


def test_with_the_llm_off_heuristics_and_validator_still_run(ingested, tmp_path):
    settings = dataclasses.replace(ingested, llm_backend="off", warehouse_uri=str(tmp_path / "wh"))
    # a copy of the ingested tables in a fresh warehouse, so the first test's rows are untouched
    source, target = ingested.warehouse(), settings.warehouse()
    for table in ("calls", "spans", "traces"):
        target.merge(table, source.read(table))
    with dg.instance_for_test() as instance:
        result = run_stage(settings, "judge", D, instance)
    assert result.success
    meta = _metadata(result, "semantic_errors")
    assert "skipped" in meta["judge"] and meta["judge_requests_sent"] == 0
    findings = target.read("semantic_errors")
    assert findings.height > 0 and not findings["detector"].str.starts_with("llm_judge:").any()
    assert target.read("state_violations").height > 0


class _Hook(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.path, self.headers["Content-Type"], json.loads(body)))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def test_the_sensor_posts_each_alert_as_slack_json_to_the_webhook(staged):
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Hook.received = []
    try:
        url = f"http://127.0.0.1:{server.server_port}/services/T0/B0/secret"
        result = staged["first"]
        context = dg.build_run_status_sensor_context(
            sensor_name="judge_alerts",
            dagster_instance=staged["instance"],
            dagster_run=result.dagster_run,
            dagster_event=result.get_run_success_event(),
            resources={"alert_webhook": AlertWebhook(url=url)},
        )
        judge_alerts(context)
    finally:
        server.shutdown()
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    failed = {name for name in ("semantic_error_rate", "deep_sessions", "session_cost") if not checks[name].passed}
    assert failed >= {"session_cost", "semantic_error_rate"}  # the $0.61 session; planted classes over 2%
    assert len(_Hook.received) == len(failed)
    for path, content_type, payload in _Hook.received:
        assert path == "/services/T0/B0/secret" and content_type == "application/json"
        assert payload["text"].startswith(":warning: tracelake ") and payload["blocks"][0]["type"] == "header"
    texts = " ".join(p["text"] for _, _, p in _Hook.received)
    assert "session_cost" in texts and "cost more than $0.50" in texts and D in texts
