"""`tracelake redact` / `tracelake unredact`: documents in, same structure out."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from tests.redact.test_modes import EMAIL, trace_document

ENV = {
    "TRACELAKE_REDACTION_KEY": "cli-test-secret-0123456789abcdef",
    "TRACELAKE_REDACTION_KEY_ID": "k-cli",
    "TRACELAKE_HASH_KEY": "cli-hash-key",
}


@pytest.fixture
def runner(tmp_path, monkeypatch) -> CliRunner:
    # `tracelake unredact` records each decryption in the warehouse's unredaction_log
    monkeypatch.setenv("TRACELAKE_WAREHOUSE", str(tmp_path / "warehouse"))
    return CliRunner()


def shape(value):
    """The structure of a JSON value with the leaves blanked out."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return None


def test_redact_jsonl_from_stdin(runner):
    documents = [trace_document("t-cli-1"), trace_document("t-cli-2")]
    text = "".join(json.dumps(d) + "\n" for d in documents)
    result = runner.invoke(app, ["redact", "-"], input=text, env=ENV)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    out = [json.loads(line) for line in lines]
    assert [shape(d) for d in out] == [shape(d) for d in documents]
    assert EMAIL.lower() not in result.stdout.lower() and "<EMAIL_ADDRESS_1>" in result.stdout


def test_redact_a_json_file_and_unredact_it(runner, tmp_path):
    document = trace_document("t-cli-3")
    source = tmp_path / "trace.json"
    source.write_text(json.dumps(document, indent=2))
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 'cli-1'\nentities:\n  CREDENTIAL: {operator: mode}\n")
    redacted = runner.invoke(app, ["redact", str(source), "--mode", "encrypt", "--policy", str(policy)], env=ENV)
    assert redacted.exit_code == 0, redacted.output
    assert "<ENC:EMAIL_ADDRESS:k-cli:" in redacted.stdout and EMAIL.lower() not in redacted.stdout.lower()
    assert redacted.stdout.startswith("{\n")  # pretty in, pretty out
    restored = runner.invoke(app, ["unredact", "-", "--policy", str(policy)], input=redacted.stdout, env=ENV)
    assert restored.exit_code == 0, restored.output
    assert json.loads(restored.stdout) == document


def test_unredact_one_trace(runner):
    documents = [trace_document("t-x"), trace_document("t-y")]
    text = "".join(json.dumps(d) + "\n" for d in documents)
    redacted = runner.invoke(app, ["redact", "-", "--mode", "encrypt"], input=text, env=ENV)
    assert redacted.exit_code == 0, redacted.output
    one = runner.invoke(app, ["unredact", "-", "--trace-id", "t-y"], input=redacted.stdout, env=ENV)
    assert one.exit_code == 0, one.output
    [restored] = [json.loads(line) for line in one.stdout.splitlines()]
    assert restored["trace_id"] == "t-y" and EMAIL.lower() in json.dumps(restored).lower()
    missing = runner.invoke(app, ["unredact", "-", "--trace-id", "t-z"], input=redacted.stdout, env=ENV)
    assert missing.exit_code == 2 and "no document of trace 't-z'" in missing.output


def test_unredact_records_each_decrypted_document_without_its_values(runner, tmp_path):
    from pipelines.warehouse import DeltaWarehouse

    documents = [trace_document("t-log-1"), trace_document("t-log-2")]
    text = "".join(json.dumps(d) + "\n" for d in documents)
    redacted = runner.invoke(app, ["redact", "-", "--mode", "encrypt"], input=text, env=ENV)
    restored = runner.invoke(app, ["unredact", "-"], input=redacted.stdout, env=ENV)
    assert restored.exit_code == 0, restored.output
    log = DeltaWarehouse(str(tmp_path / "warehouse")).read("unredaction_log")
    assert sorted(log["trace_id"]) == ["t-log-1", "t-log-2"]
    assert set(log["purpose"]) == {"unredact"} and set(log["key_ids"].explode()) == {"k-cli"}
    assert (log["tokens"] > 0).all()
    assert EMAIL.lower() not in json.dumps(log.to_dicts(), default=str).lower()


def test_a_json_array_stays_an_array(runner):
    result = runner.invoke(app, ["redact", "-", "--mode", "synthetic"], input=json.dumps([trace_document("t-a")]))
    assert result.exit_code == 0, result.output
    assert isinstance(json.loads(result.stdout), list)


def test_errors_say_what_is_wrong_without_quoting_the_input(runner, tmp_path):
    bad = json.dumps(trace_document("t-ok")) + "\n" + '{"trace_id": "t", "note": "call ' + EMAIL + '"\n'
    result = runner.invoke(app, ["redact", "-"], input=bad)
    assert result.exit_code == 2
    assert "line 2 is not valid JSON" in result.output and EMAIL not in result.output

    result = runner.invoke(app, ["redact", "-", "--mode", "scramble"], input="{}")
    assert result.exit_code == 2 and "placeholder, encrypt, synthetic" in result.output

    result = runner.invoke(app, ["redact", str(tmp_path / "missing.jsonl")])
    assert result.exit_code == 2 and "no such file" in result.output

    result = runner.invoke(app, ["redact", "-", "--mode", "encrypt"], input="{}", env={"TRACELAKE_REDACTION_KEY": ""})
    assert result.exit_code == 2 and "TRACELAKE_REDACTION_KEY" in result.output

    (tmp_path / "p.yaml").write_text("version: '1'\nentities: {EMAIL_ADDRESS: {operator: hide}}\n")
    result = runner.invoke(app, ["redact", "-", "--policy", str(tmp_path / "p.yaml")], input="{}")
    assert result.exit_code == 2 and "entities.EMAIL_ADDRESS.operator" in result.output
