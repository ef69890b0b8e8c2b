"""A demo day, ingested in-process, with three things planted in it:

- a bad support answer: a Portuguese customer whose retrieved documents include
  a stale article carrying the simulator's planted-document sentence
  (pipelines/simulator/behaviour.py, ``planted_document_rule``), answered in
  English and thumbed down;
- a hostile trace: markup, event handlers, ``javascript:`` links, CSS with
  remote URLs and a 1 MB line in the user's message and the answer;
- the judge's findings for one agent session (state_violations, semantic_errors)
  in the shape its tables have.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.demo import generate
from pipelines.demo import stores as demo_stores
from pipelines.record.canonical import call_id, request_sha256
from pipelines.resources.warehouse import Warehouse
from pipelines.rot.render import render_template
from pipelines.simulator.behaviour import STALE_DOCUMENT_MARKER
from tests.environments import local_settings, run_stage

DAY = date(2026, 11, 29)
PLANTED_DOC = "kb-pt-legado-07"
# the stale article: its last sentence is what the simulator reacts to
PLANTED_TEXT = f"Política antiga de reembolso, revisada em 2019. {STALE_DOCUMENT_MARKER}"
BAD_ANSWER = "Thanks. Refunds are issued to the original payment method within 5 business days. [kb-refunds-02]"
HOSTILE_TRACE = "hostile0000000000000000000000001"
TWIN_TRACE = "twin0000000000000000000000000001"
TWIN_ANSWER = "I have passed order this to a colleague for approval."


@dataclass(frozen=True)
class DemoDay:
    warehouse_uri: str
    bad_call_id: str
    bad_trace_id: str
    user_id: str
    hostile_call_id: str
    agent_trace_id: str
    hostile_marker: str
    twin_of: str

    def warehouse(self) -> Warehouse:
        return Warehouse(uri=self.warehouse_uri)


def _answers(source: Path) -> list[tuple[Path, list[dict]]]:
    files = sorted((source / f"{DAY:%Y/%m/%d}" / "support").glob("*.jsonl.gz"))
    return [(f, [json.loads(line) for line in gzip.decompress(f.read_bytes()).splitlines()]) for f in files]


def _plant_bad_call(source: Path) -> dict:
    """Make one Portuguese v3 answer retrieve the stale article, answer in English and get a thumbs-down."""
    capture = demo_stores.capture_time_stores()
    for path, docs in _answers(source):
        for doc in docs:
            prompt, retrieval = doc.get("prompt"), doc.get("retrieval")
            if not (prompt and prompt["version"] == "v3" and doc["segment"]["language"] == "pt-BR"):
                continue
            if "error" in doc or doc.get("feedback") or len(retrieval["doc_ids"]) != 3:
                continue
            retrieval["doc_ids"][1], retrieval["texts"][1] = PLANTED_DOC, PLANTED_TEXT
            documents = [
                {"doc_id": i, "text": t, "score": s}
                for i, t, s in zip(retrieval["doc_ids"], retrieval["texts"], retrieval["scores"], strict=True)
            ]
            template = capture.templates[demo_stores.SUPPORT_TEMPLATE]["v3"]
            doc["request"]["system"] = render_template(template, prompt["variables"], documents, clock=None)
            doc["rendered_request_sha256"] = request_sha256(doc["request"])
            doc["response"]["content"] = [{"type": "text", "text": BAD_ANSWER}]
            doc["response"]["stop_reason"] = "end_turn"
            doc["feedback"] = {"source": "user", "name": "thumbs", "value": "down", "at": doc["ended_at"]}
            doc["escalated"] = False
            path.write_bytes(gzip.compress("".join(json.dumps(d) + "\n" for d in docs).encode()))
            return doc
    raise AssertionError("the demo day has no Portuguese v3 answer to plant the bad call in")


HOSTILE = (
    "<script>window.__pwned = 'script'; alert(1)</script>"
    "<img src=x onerror=\"window.__pwned='onerror'\">"
    "<a href=\"javascript:window.__pwned='link'\">click me</a>"
    "<svg onload=\"window.__pwned='svg'\"></svg>"
    "<style>@import url({base}/import.css); body {{ background: url({base}/bg.png) }}</style>"
    '<link rel="stylesheet" href="{base}/sheet.css">'
    '<iframe src="{base}/frame"></iframe>'
    '<meta http-equiv="refresh" content="0; url={base}/refresh">'
    '</pre></section><base href="{base}/">'
)


def hostile_text(base: str) -> str:
    return HOSTILE.format(base=base)


def _plant_hostile(source: Path, base: str) -> dict:
    text = hostile_text(base)
    long_line = "x" * 1_000_000
    request = {
        "model": demo_stores.SONNET,
        "max_tokens": 256,
        "system": "You are a helpful assistant.",
        "messages": [{"role": "user", "content": f"{text} {long_line} END-OF-LONG-LINE"}],
    }
    doc = {
        "format": "tracelake.frozen_call",
        "version": 1,
        "trace_id": HOSTILE_TRACE,
        "span_id": "ffffffffffffffff",
        "user_id": "u-hostile",
        "occurred_at": f"{DAY}T12:00:00+00:00",
        "ended_at": f"{DAY}T12:00:01+00:00",
        "service": "support.answer",
        "model": {"id": demo_stores.SONNET},
        "request": request,
        "rendered_request_sha256": request_sha256(request),
        "response": {
            "id": "msg_hostile",
            "type": "message",
            "role": "assistant",
            "model": demo_stores.SONNET,
            "content": [{"type": "text", "text": f"Echo: {text}"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 250_000, "output_tokens": 40},
        },
    }
    folder = source / f"{DAY:%Y/%m/%d}" / "escalations"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{HOSTILE_TRACE}.json").write_text(json.dumps(doc))
    return doc


def _plant_twin(source: Path) -> str:
    """A second run of one refunded agent session, same input, that answers
    instead of refunding at step 4; returns the original's trace id."""
    folder = source / f"year={DAY:%Y}/month={DAY:%m}/day={DAY:%d}" / "agent"
    events = [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.read_text().splitlines()]
    sessions: dict[str, list[dict]] = {}
    for e in events:
        sessions.setdefault(e["trace_id"], []).append(e)
    original = next(
        t for t, evs in sorted(sessions.items()) if any(e["payload"].get("outcome") == "success" for e in evs)
    )
    twin = []
    for e in sessions[original][:5]:
        copy = json.loads(json.dumps(e))
        copy["trace_id"], copy["session_id"] = TWIN_TRACE, "as-twin"
        copy["event_id"] = "t" + copy["event_id"][1:]
        if copy["parent_event_id"]:
            copy["parent_event_id"] = "t" + copy["parent_event_id"][1:]
        twin.append(copy)
    twin[4]["payload"]["response"]["content"] = [{"type": "text", "text": TWIN_ANSWER}]
    twin[4]["payload"]["response"]["stop_reason"] = "end_turn"
    end = json.loads(json.dumps(sessions[original][-1]))
    end.update(trace_id=TWIN_TRACE, session_id="as-twin", step_index=5, event_id="t" + end["event_id"][1:])
    end["parent_event_id"] = twin[0]["event_id"]
    end["payload"] = {"outcome": "escalated"}
    twin.append(end)
    (folder / "99-twin.jsonl").write_text("".join(json.dumps(e) + "\n" for e in twin))
    return original


def _write_findings(warehouse_uri: str, trace_id: str) -> None:
    """The judge stage's two tables (branch judge's schema.py columns), one
    violation pair and one finding for ``trace_id``."""
    violations = pa.table(
        {
            "violation_id": ["v1", "v2"],
            "trace_id": [trace_id, trace_id],
            "session_id": ["s", "s"],
            "event_key": ["e4", "e6"],
            "occurred_date": [DAY, DAY],
            "code": ["result_without_call", "results_out_of_order"],
            "step_index": [4, 6],
            "detail": ["tool result with no matching tool_use id", "second result out of order"],
            "first_in_trace": [True, False],
            "validator_version": ["1", "1"],
            "record_sha256": ["a", "b"],
        }
    )
    errors = pa.table(
        {
            "finding_id": ["f1"],
            "trace_id": [trace_id],
            "session_id": ["s"],
            "call_id": ["c"],
            "event_key": ["e7"],
            "occurred_date": [DAY],
            "error_class": ["upstream_data_missing"],
            "is_error": [True],
            "detector": ["empty_tool_result_then_claim"],
            "detector_version": ["1"],
            "confidence": [0.9],
            "evidence": ["the lookup returned nothing and the answer cites an order total"],
            "affected_step": [7],
            "cause_step": [2],
            "judged_with_probability": [1.0],
            "judge_prompt_sha256": pa.array([None], pa.string()),
            "request_key": pa.array([None], pa.string()),
            "simulated": [False],
            "record_sha256": ["c"],
        }
    )
    warehouse = Warehouse(uri=warehouse_uri)
    warehouse.merge("state_violations", violations)
    warehouse.merge("semantic_errors", errors)


@pytest.fixture(scope="session")
def demo_day(tmp_path_factory) -> DemoDay:
    tmp = tmp_path_factory.mktemp("debug-demo")
    settings = local_settings(tmp)
    generate(settings.source_uri, calls=300, days=1, seed=12, end=DAY)
    source = Path(settings.source_uri)
    bad = _plant_bad_call(source)
    hostile = _plant_hostile(source, "http://127.0.0.1:9")
    twin_of = _plant_twin(source)
    assert run_stage(settings, "ingest", DAY.isoformat()).success
    warehouse = settings.warehouse()
    agents = warehouse.read("traces").filter(
        (warehouse.read("traces")["service"] == "agent.orders") & (warehouse.read("traces")["step_count"] >= 7)
    )
    agent_trace = agents.sort("trace_id")["trace_id"][0]
    _write_findings(settings.warehouse_uri, agent_trace)
    return DemoDay(
        warehouse_uri=settings.warehouse_uri,
        bad_call_id=call_id("frozen_call", bad["trace_id"], bad["span_id"]),
        bad_trace_id=bad["trace_id"],
        user_id=bad["user_id"],
        hostile_call_id=call_id("frozen_call", hostile["trace_id"], hostile["span_id"]),
        agent_trace_id=agent_trace,
        hostile_marker="END-OF-LONG-LINE",
        twin_of=twin_of,
    )


@pytest.fixture
def run(demo_day, monkeypatch):
    """``run(*args, code=0)``: the `tracelake` command on the demo day's warehouse; returns its output."""
    monkeypatch.setenv("TRACELAKE_WAREHOUSE", demo_day.warehouse_uri)
    monkeypatch.setenv("COLUMNS", "240")
    runner = CliRunner()

    def invoke(*args: str, code: int = 0) -> str:
        result = runner.invoke(app, list(args))
        assert result.exit_code == code, result.output
        return result.output

    return invoke
