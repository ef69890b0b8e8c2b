"""`tracelake rot TRACE_OR_CALL_ID` against a real Delta warehouse and real stores."""

from __future__ import annotations

from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.demo import stores as demo
from pipelines.resources.warehouse import Warehouse
from tests.rot.conftest import StoreAt, aged, agent_call, fresh_stores, support_call


def test_rot_prints_the_verdict_and_a_diff_of_each_rotted_block(tmp_path, monkeypatch):
    stores = fresh_stores()
    rotted = support_call(stores, version=demo.EDITED_VERSION, doc_ids=(demo.CHANGED_DOC,), span_id="x1")
    fine = support_call(stores, version="v1", doc_ids=("kb-billing-01",), span_id="x2", trace_id=rotted["trace_id"])
    agent = agent_call(stores)
    Warehouse(uri=str(tmp_path / "warehouse")).merge("calls", [rotted, fine, agent])
    StoreAt(str(tmp_path / "stores")).put(aged())
    monkeypatch.setenv("TRACELAKE_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("TRACELAKE_STORES", str(tmp_path / "stores"))
    monkeypatch.setenv("COLUMNS", "220")
    runner = CliRunner()

    result = runner.invoke(app, ["rot", rotted["call_id"]])
    assert result.exit_code == 0, result.output
    assert "ROTTED  template_changed, document_changed" in result.output
    assert "-Never promise a refund the policy does not allow." in result.output
    assert "+Do not promise any refund or credit the policy does not allow." in result.output
    assert "refunded in full within 30 days" in result.output and "within 14 days" in result.output
    assert "Ana Souza" not in result.output  # the user's messages are never diffed

    result = runner.invoke(app, ["rot", rotted["trace_id"]])
    assert result.exit_code == 0, result.output
    assert "VERIFIED" in result.output and "2 calls: 1 rotted, 1 verified" in result.output

    result = runner.invoke(app, ["rot", agent["call_id"], "--date", "2026-11-02"])
    assert "model_alias_moved" in result.output and demo.SONNET_NEXT in result.output

    result = runner.invoke(app, ["rot", "no-such-id"])
    assert result.exit_code == 1
    assert "no call or trace 'no-such-id'" in result.output
