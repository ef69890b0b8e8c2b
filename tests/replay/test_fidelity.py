"""Fidelity of a replay: exact only when the bytes sent are the ones the recorded
hash witnessed and nothing the call named rotted."""

from __future__ import annotations

import json

import pytest

from pipelines.replay.fidelity import APPROXIMATE, EXACT, INELIGIBLE, fidelity_of

REQUEST = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


def call(**changes):
    base = {
        "call_id": "c1",
        "request_json": json.dumps(REQUEST),
        "rendered_request_sha256": "h",
        "request_sha256": "h",
        "request_hash_matches": True,
        "context_complete": True,
        "truncated": False,
        "capture_missing": ["seed"],
        "flags": [],
        "template_id": "support-answer",
        "template_version": "v3",
        "template_variables_json": "{}",
    }
    return {**base, **changes}


VERIFIED = {"status": "verified", "components": [], "missing": [], "replay_fidelity": "exact"}


@pytest.mark.parametrize("rerenders", [False, True])
@pytest.mark.parametrize(
    "components", [["template_changed"], ["document_changed", "document_missing"], ["model_alias_moved"]]
)
def test_rotted_calls_are_approximate_with_the_components_named(rerenders, components):
    # rot_checks says exact replay of the frozen bytes is possible, but the names rotted
    rot = {"status": "rotted", "components": components, "missing": [], "replay_fidelity": "exact"}
    got = fidelity_of(call(), rot, rerenders_template=rerenders)
    assert got.level == APPROXIMATE
    assert list(got.reasons) == components


def test_verified_call_is_exact_and_a_missing_seed_does_not_matter():
    got = fidelity_of(call(), VERIFIED)
    assert (got.level, got.reasons) == (EXACT, ())


def test_redacted_placeholders_make_the_request_sent_not_the_one_recorded():
    got = fidelity_of(call(flags=["redacted"]), VERIFIED, redaction_mode="placeholder")
    assert got.level == APPROXIMATE and got.reasons == ("redacted_placeholders",)
    assert fidelity_of(call(flags=["redacted"]), VERIFIED, redaction_mode="encrypt").reasons == ("redacted_encrypted",)


def test_a_body_the_hash_did_not_witness_is_approximate():
    got = fidelity_of(call(request_hash_matches=False, request_sha256="other"), None)
    assert got.level == APPROXIMATE
    assert set(got.reasons) == {"not_rot_checked", "request_not_hash_witnessed"}


def test_incomplete_context_is_ineligible_and_says_what_is_missing():
    got = fidelity_of(call(context_complete=False, capture_missing=["tool_results", "seed"]), VERIFIED)
    assert got.level == INELIGIBLE and got.reasons == ("tool_results",)
    assert not got.sendable
    assert fidelity_of(call(request_json=None), VERIFIED).reasons[0] == "input"


def test_a_template_candidate_needs_the_prompt_version():
    got = fidelity_of(call(template_version=None), VERIFIED, rerenders_template=True)
    assert got.level == INELIGIBLE and got.reasons == ("prompt_version",)
    # the recorded bytes alone can still be replayed
    assert fidelity_of(call(template_version=None), VERIFIED).level == EXACT


def test_an_encrypted_call_is_exact_only_when_its_decrypted_request_was_verified():
    encrypted = call(flags=["redacted"])
    got = fidelity_of(encrypted, VERIFIED, redaction_mode="encrypt", unlocked="verified")
    assert (got.level, got.reasons) == (EXACT, ())
    for outcome in ("replay_key_absent", "decrypted_request_mismatch"):
        got = fidelity_of(encrypted, VERIFIED, redaction_mode="encrypt", unlocked=outcome)
        assert (got.level, got.reasons) == (APPROXIMATE, (outcome,))
    # a rotted call stays approximate however well it decrypts
    rotted = {"status": "rotted", "components": ["template_changed"], "missing": [], "replay_fidelity": "exact"}
    assert fidelity_of(encrypted, rotted, redaction_mode="encrypt", unlocked="verified").reasons == (
        "template_changed",
    )
    # a token that does not decrypt: nothing is sent
    got = fidelity_of(encrypted, VERIFIED, redaction_mode="encrypt", unlocked="decryption_failed")
    assert (got.level, got.reasons, got.sendable) == (INELIGIBLE, ("decryption_failed",), False)


def test_synthetic_mode_says_it_sends_fakes():
    got = fidelity_of(call(flags=["redacted"]), VERIFIED, redaction_mode="synthetic")
    assert (got.level, got.reasons) == (APPROXIMATE, ("synthetic_values",))
