"""The replay key's sources and the seal that puts tokens back over echoed plaintext."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipelines.redact.keys import MissingKey
from pipelines.replay.unlock import Decryption, Seal, log_rows, replay_keys


def test_the_key_comes_from_the_variable_or_a_reference_and_none_without_either(tmp_path):
    assert replay_keys({}) is None
    direct = replay_keys({"TRACELAKE_REDACTION_KEY": "s3cret-value"})
    secret = tmp_path / "key"
    secret.write_text("s3cret-value\n")
    from_file = replay_keys({"TRACELAKE_REDACTION_KEY_REF": f"file:{secret}"})
    from_env = replay_keys({"TRACELAKE_REDACTION_KEY_REF": "env:VAULT_KEY", "VAULT_KEY": "s3cret-value"})
    assert direct.encryption_key() == from_file.encryption_key() == from_env.encryption_key()
    with pytest.raises(MissingKey, match="not a readable file") as error:
        replay_keys({"TRACELAKE_REDACTION_KEY_REF": f"file:{tmp_path / 'nothing'}"})
    with pytest.raises(MissingKey, match="file:/path or env:NAME"):
        replay_keys({"TRACELAKE_REDACTION_KEY_REF": "kms:alias/x"})
    assert "s3cret" not in str(error.value) and "s3cret" not in repr(direct)


def test_the_seal_puts_each_plaintext_back_as_its_token_longest_first():
    seal = Seal({"<ENC:A:k:1>": "ana@example.com", "<ENC:B:k:2>": "ana", "<ENC:C:k:3>": "123.456.789-09"})
    text = "ana wrote from ana@example.com about 123.456.789-09"
    assert seal(text) == "<ENC:B:k:2> wrote from <ENC:A:k:1> about <ENC:C:k:3>"
    nested = seal({"content": [{"type": "text", "text": text}], "n": 3, "none": None})
    assert "ana" not in str(nested).replace("<ENC", "") and nested["n"] == 3 and nested["none"] is None
    assert Seal({})("ana") == "ana"


def test_log_rows_hold_ids_and_outcomes_only():
    at = datetime(2026, 11, 20, 12, tzinfo=UTC)
    rows = log_rows([Decryption("c1", "t1", at, ("k1",), 2, "verified")], purpose="replay", run_id="r1", who="ops")
    assert rows[0]["call_id"] == "c1" and rows[0]["actor"] == "ops" and rows[0]["decrypted_date"] == at.date()
    with pytest.raises(ValueError, match="purpose"):
        log_rows([], purpose="curiosity", run_id="r1")
