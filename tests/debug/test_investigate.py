"""`tracelake investigate` on a demo day with three planted tickets, through the real SDK over HTTP
to the simulator:

- the stale document (as tests/debug/conftest.py plants it): found from the user id and a time,
  reproduced, and the planted document named as the cause with its rates;
- an English customer's answer recorded in Portuguese and thumbed down: the simulator answers English
  customers in English, so the failure does not reproduce and the report says so;
- a thumbed-down answer rendered from template version v2, edited in place since (the demo's aged
  stores): the replay is approximate, and the report says it is because the template changed.

The HTML report is opened in Chromium: nothing runs, nothing is requested, the conclusion and the
differences table are visible.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from playwright.sync_api import sync_playwright
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.demo import generate
from pipelines.demo import stores as demo_stores
from pipelines.record.canonical import call_id
from pipelines.simulator import running
from tests.browser import launch
from tests.debug.conftest import DAY, PLANTED_DOC, _answers, _plant_bad_call
from tests.environments import local_settings, run_stage

PORTUGUESE_ANSWER = "Obrigado pelo contato. Registrei o seu pedido e enviei a confirmação por e-mail."


@dataclass(frozen=True)
class Tickets:
    warehouse_uri: str
    stores_uri: str
    bad_user: str
    bad_at: str
    bad_call: str
    gone_trace: str
    rotted_trace: str


def _thumb_down(path: Path, docs: list[dict], doc: dict, text: str | None = None) -> dict:
    if text is not None:
        doc["response"]["content"] = [{"type": "text", "text": text}]
    doc["feedback"] = {"source": "user", "name": "thumbs", "value": "down", "at": doc["ended_at"]}
    path.write_bytes(gzip.compress("".join(json.dumps(d) + "\n" for d in docs).encode()))
    return doc


def _plant(source: Path, version: str, language, text: str | None, taken: set[str]) -> dict:
    """Thumb down one support answer of template ``version`` whose customer's language passes ``language``."""
    for path, docs in _answers(source):
        for doc in docs:
            prompt = doc.get("prompt")
            if not prompt or prompt["version"] != version or not language(doc["segment"]["language"]):
                continue
            if "error" in doc or doc.get("feedback") or doc["trace_id"] in taken:
                continue
            return _thumb_down(path, docs, doc, text)
    raise AssertionError(f"the demo day has no {version} support answer to plant a ticket in")


def build_tickets(tmp: Path) -> Tickets:
    """The demo day with the three tickets planted, ingested under ``tmp``."""
    settings = local_settings(tmp)
    # the aged stores: support-answer v2 edited in place, the index rebuilt (pipelines/demo/stores.py)
    generate(settings.source_uri, calls=300, days=1, seed=12, end=DAY, stores_out=settings.stores_uri)
    source = Path(settings.source_uri)
    bad = _plant_bad_call(source)
    gone = _plant(source, "v3", lambda lang: lang != "pt-BR", PORTUGUESE_ANSWER, {bad["trace_id"]})
    rotted = _plant(source, demo_stores.EDITED_VERSION, lambda lang: True, None, {bad["trace_id"], gone["trace_id"]})
    assert run_stage(settings, "ingest", DAY.isoformat()).success
    return Tickets(
        warehouse_uri=settings.warehouse_uri,
        stores_uri=settings.stores_uri,
        bad_user=bad["user_id"],
        bad_at=bad["occurred_at"][:16],
        bad_call=call_id("frozen_call", bad["trace_id"], bad["span_id"]),
        gone_trace=gone["trace_id"],
        rotted_trace=rotted["trace_id"],
    )


@pytest.fixture(scope="module")
def tickets(tmp_path_factory) -> Tickets:
    return build_tickets(tmp_path_factory.mktemp("investigate-demo"))


@pytest.fixture(scope="module")
def simulator():
    with running() as sim:
        yield sim


@pytest.fixture
def investigate(tickets, simulator, monkeypatch, tmp_path):
    """``investigate(*args, code=0)``: (its output, the HTML report's path)."""
    monkeypatch.setenv("TRACELAKE_WAREHOUSE", tickets.warehouse_uri)
    monkeypatch.setenv("TRACELAKE_STORES", tickets.stores_uri)
    monkeypatch.setenv("TRACELAKE_LLM", "simulator")
    monkeypatch.setenv("TRACELAKE_LLM_URL", simulator.url)
    monkeypatch.setenv("COLUMNS", "240")

    def run(*args: str, code: int = 0) -> tuple[str, Path]:
        report = tmp_path / f"report-{len(list(tmp_path.iterdir()))}.html"
        result = CliRunner().invoke(app, ["investigate", *args, "-o", str(report)])
        assert result.exit_code == code, result.output
        return result.output, report

    return run


def _conclusion(output: str) -> str:
    lines = output.splitlines()
    return lines[lines.index("Conclusion") + 1].strip()


def test_the_planted_document_is_named_as_the_cause(investigate, tickets, simulator):
    output, report = investigate("--user-id", tickets.bad_user, "--at", tickets.bad_at, "--window", "4m")
    assert f"call {tickets.bad_call}: it got the negative feedback" in output
    # the plan comes before anything is sent, priced
    assert output.index("LLM plan for the investigation") < output.index("3. Reproduce")
    assert re.search(r"cost: up to \$\d+\.\d{4}", output)
    assert "symptom: language_mismatch" in output
    conclusion = _conclusion(output)
    assert re.search(r"reproduces 10/10 \[0\.\d\d–1\.00\]", conclusion), conclusion
    assert f"the retrieved block `{PLANTED_DOC}` causes it" in conclusion, conclusion
    # its rates: 10/10 -> k/10 when replaced, and the good sibling 10/10 with it introduced
    assert re.search(r"10/10 → \d/10 when replaced; \d+/10 → 10/10 when introduced", conclusion), conclusion
    assert "(simulated: tracelake's simulator, not a model)" in output
    assert "replay path: stored request (approximate)" in output
    assert f"wrote {report}" in output
    rows = pl.read_delta(str(Path(tickets.warehouse_uri) / "ablations"))
    assert rows.filter(pl.col("bad_call_id") == tickets.bad_call).height > 2

    # a re-run reuses every stored answer: nothing sent, nothing billed, the same conclusion
    sent_before = len(simulator.log)
    again, _ = investigate("--call-id", tickets.bad_call, "--promote", "support-language")
    assert len(simulator.log) == sent_before
    assert "0 to send" in again and "LLM: 0 request(s) sent" in again and "$0.0000 in all" in again
    assert _conclusion(again) == conclusion
    assert "kept as regression case" in again and "in dataset support-language (new)" in again


def test_a_failure_that_does_not_come_back_is_reported_as_not_reproducing(investigate, tickets):
    output, _ = investigate("--trace-id", tickets.gone_trace, "--n", "8")
    conclusion = _conclusion(output)
    assert conclusion.startswith("does not reproduce (0/8 [0.00–0."), conclusion
    assert "likely provider drift" in conclusion or "likely" in conclusion
    assert "5. Isolate" in output and "not run: the failure does not reproduce" in output


def test_a_rotted_template_makes_the_replay_approximate_and_says_why(investigate, tickets):
    output, _ = investigate("--trace-id", tickets.rotted_trace, "--n", "4", "--budget-usd", "5")
    assert "rot check (now): rotted (template_changed" in output
    assert "fidelity: approximate" in output
    assert f"template_changed: template {demo_stores.SUPPORT_TEMPLATE} {demo_stores.EDITED_VERSION} changed" in output
    assert "the replay was approximate: template_changed" in _conclusion(output)


def test_a_budget_below_the_plan_or_plan_alone_sends_nothing(investigate, tickets, simulator):
    sent_before = len(simulator.log)
    output, report = investigate("--trace-id", tickets.rotted_trace, "--n", "50", "--budget-usd", "0.000001", code=3)
    assert "is over the budget of $0.0000" in output
    assert len(simulator.log) == sent_before and not report.exists()
    planned, report = investigate("--trace-id", tickets.rotted_trace, "--n", "50", "--plan")
    assert "LLM plan for the investigation" in planned and "3. Reproduce" not in planned
    assert len(simulator.log) == sent_before and not report.exists()


def test_the_html_report_runs_nothing_and_requests_nothing(investigate, tickets):
    _, report = investigate("--call-id", tickets.bad_call)
    html = report.read_text()
    assert "<script" not in html and html.index("Content-Security-Policy") < html.index("<style>")
    url = report.resolve().as_uri()
    requests, errors = [], []
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url, wait_until="load")
            scripts = page.evaluate("() => document.scripts.length")
            conclusion = page.locator("p.conclusion")
            differences = page.locator("table#differences")
            visible = conclusion.is_visible() and differences.is_visible()
            conclusion_text = conclusion.inner_text()
            rows = differences.locator("tr").count()
            planted_row = differences.locator("tr", has_text=PLANTED_DOC).count()
        finally:
            browser.close()
    assert requests == [url] and errors == [] and scripts == 0
    assert visible
    assert f"the retrieved block `{PLANTED_DOC}` causes it" in conclusion_text
    assert rows >= 2 and planted_row == 1


def test_no_answers_is_not_a_finding(investigate, tickets, monkeypatch):
    """An unreachable backend: every sample fails, and the report says nothing can be concluded (not
    "does not reproduce")."""
    calls = pl.read_delta(str(Path(tickets.warehouse_uri) / "calls"), columns=["call_id", "trace_id", "service"])
    planted = {tickets.gone_trace, tickets.rotted_trace}
    untouched = calls.filter((pl.col("service") == "support.answer") & ~pl.col("trace_id").is_in(list(planted)))
    monkeypatch.setenv("TRACELAKE_LLM_URL", "http://127.0.0.1:9")  # nothing listens there
    output, report = investigate("--call-id", untouched.sort("call_id")["call_id"][0], "--n", "3", code=4)
    assert "3 of 3 samples got no answer (APIConnectionError" in output
    assert _conclusion(output).startswith("not replayed: none of the 3 requests got an answer")
    assert "does not reproduce" not in output and report.exists()
