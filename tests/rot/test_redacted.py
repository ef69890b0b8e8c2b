"""Rot checks on calls redacted by the real redactor (pipelines.redact): compared
by keyed block hashes when the text holds placeholders, and whole again when
encrypt-mode values can be decrypted with the key."""

from __future__ import annotations

import json

import pytest

from pipelines.demo import stores as demo
from pipelines.record.canonical import request_sha256
from pipelines.redact import redactor as redactor_module
from pipelines.redact.keys import KeyRing
from pipelines.redact.redactor import Redactor
from pipelines.rot import redaction
from pipelines.rot.check import Checker
from pipelines.rot.redaction import RedactionView, audits_from_rows
from pipelines.rot.render import build_request, render_template
from tests.rot.conftest import CAPTURED, TODAY, StoreAt, aged, fresh_stores, ingest, support_call

KEYS = KeyRing.from_secrets(encryption={"k-test": "a-long-test-secret-that-is-not-a-real-one-0123456789"})
CONCIERGE = "concierge"


@pytest.fixture(scope="module")
def placeholder():
    with Redactor(mode="placeholder", ner=False) as redactor:
        yield redactor


@pytest.fixture(scope="module")
def encrypt():
    with Redactor(mode="encrypt", keys=KEYS, ner=False) as redactor:
        yield redactor


@pytest.fixture
def local_store(tmp_path) -> StoreAt:
    return StoreAt(str(tmp_path / "stores"))


def redacted(redactor: Redactor, call: dict) -> tuple[dict, RedactionView]:
    result = redactor.redact_rows([call])
    row = result.calls[0]
    assert "redacted" in row["flags"], "the fixture call must hold PII the redactor finds"
    return row, RedactionView(audits_from_rows(result.audit), keys=redactor.keys)


def check(store: StoreAt, call: dict, view: RedactionView):
    return Checker(store.ingredients([call]), TODAY, redaction=view).check(call)


def concierge_call(stores: demo.Stores) -> dict:
    """A call whose template variables carry the customer's email (PII in the system prompt)."""
    source = "You help {{ customer }} <{{ email }}> on the {{ tier }} plan."
    stores.templates[CONCIERGE] = {"v1": source}
    variables = {"customer": "Ana", "email": "ana.souza@example.com", "tier": "vip"}
    request = build_request(
        model=demo.SONNET,
        system=render_template(source, variables, clock=CAPTURED),
        messages=[{"role": "user", "content": "Write to ana.souza@example.com please"}],
        params=stores.params["support.answer"],
    )
    return ingest(
        {
            "trace_id": "t-concierge",
            "span_id": "c1",
            "occurred_at": CAPTURED.isoformat(),
            "service": "support.answer",
            "prompt": {"template_id": CONCIERGE, "version": "v1", "variables": variables},
            "model": {"id": demo.SONNET},
            "request": request,
            "rendered_request_sha256": request_sha256(request),
        }
    )


def test_placeholder_redacted_call_verifies_on_keyed_block_hashes(local_store, placeholder):
    stores = fresh_stores()
    local_store.put(stores)
    row, view = redacted(placeholder, support_call(stores))
    assert "<CREDIT_CARD_1>" in json.loads(row["request_json"])["messages"][0]["content"]
    result = check(local_store, row, view)
    assert (result.status, result.components, result.basis) == ("verified", [], "keyed_block_hashes")
    assert result.replay_fidelity == "approximate"  # the stored messages are not the bytes that were sent


def test_placeholder_redacted_call_still_names_what_rotted(local_store, placeholder):
    stores = fresh_stores()
    doc_row, view = redacted(placeholder, support_call(stores, version="v3", doc_ids=(demo.CHANGED_DOC,)))
    tpl_row, view2 = redacted(
        placeholder, support_call(stores, version=demo.EDITED_VERSION, doc_ids=("kb-billing-01",), span_id="s2")
    )
    local_store.put(aged())
    result = check(local_store, doc_row, view)
    assert (result.status, result.components, result.basis) == ("rotted", ["document_changed"], "keyed_block_hashes")
    result = check(local_store, tpl_row, view2)
    assert (result.status, result.components) == ("rotted", ["template_changed"])


def test_redacted_template_variables_make_the_system_prompt_unverifiable(local_store, placeholder):
    stores = fresh_stores()
    call = concierge_call(stores)
    local_store.put(stores)
    row, view = redacted(placeholder, call)
    assert "ana.souza@example.com" not in row["template_variables_json"]
    result = check(local_store, row, view)
    assert (result.status, result.missing, result.basis) == (
        "unverifiable",
        ["template_variables"],
        "keyed_block_hashes",
    )
    assert not any("ana.souza" in line for line in result.detail)


def test_encrypted_calls_compare_whole_on_decrypted_values_with_the_key(local_store, encrypt):
    stores = fresh_stores()
    call = concierge_call(stores)
    local_store.put(stores)
    row, view = redacted(encrypt, call)
    assert "<ENC:" in row["template_variables_json"]
    result = check(local_store, row, view)
    assert (result.status, result.basis, result.replay_fidelity) == ("verified", "decrypted_values", "exact")
    assert result.rerendered_sha256 == call["rendered_request_sha256"]

    # without the encryption key the same row can only be judged block by block
    no_key = RedactionView(view.audits, keys=KeyRing())
    assert check(local_store, row, no_key).status == "unverifiable"
    plain = support_call(stores)
    row, view = redacted(encrypt, plain)
    result = check(local_store, row, RedactionView(view.audits, keys=KeyRing()))
    assert (result.status, result.basis) == ("verified", "keyed_block_hashes")


def test_keyed_hashes_made_with_another_key_are_not_misread_as_rot(local_store, placeholder):
    stores = fresh_stores()
    local_store.put(stores)
    row, view = redacted(placeholder, support_call(stores))
    other = RedactionView(view.audits, keys=KeyRing.from_secrets(hash_secret="another-hash-key"))
    result = check(local_store, row, other)
    assert (result.status, result.missing) == ("unverifiable", ["hash_key"])


def test_the_redacted_flag_is_the_redactors():
    assert redaction.REDACTED_FLAG == redactor_module.REDACTED_FLAG


def test_a_redacted_demo_day_gets_the_verdicts_the_demo_changes_imply(tmp_path, placeholder):
    from datetime import UTC, date, datetime

    from pipelines.demo import generate
    from pipelines.ingest.objects import SourceObject, ingest_objects
    from pipelines.resources.object_store import ObjectStore
    from tests.rot.test_demo_nightly import expected_verdict

    day = date(2026, 11, 20)
    generate(str(tmp_path / "source"), calls=200, days=1, seed=11, end=day, stores_out=str(tmp_path / "stores"))
    source = ObjectStore(uri=str(tmp_path / "source"))
    objects = [
        SourceObject(o.key, source.uri_for(o.key), o.etag, o.size, o.last_modified, source.read(o.key))
        for o in source.list_day(day)
    ]
    result = placeholder.redact_rows(ingest_objects(objects, day, "run", datetime.now(UTC)).calls)
    calls = result.calls
    assert sum("redacted" in (c["flags"] or []) for c in calls) > len(calls) // 2
    view = RedactionView(audits_from_rows(result.audit), keys=placeholder.keys)
    store = StoreAt(str(tmp_path / "stores"))
    checks = Checker(store.ingredients(calls), datetime.now(UTC), redaction=view).check_all(calls)
    assert [(c.status, c.components, c.missing) for c in checks] == [expected_verdict(c) for c in calls]
    redacted_rows = [c for c, row in zip(checks, calls, strict=True) if "redacted" in (row["flags"] or [])]
    assert {c.basis for c in redacted_rows} <= {"keyed_block_hashes", "none"}
    assert {c.replay_fidelity for c in redacted_rows} == {"approximate"}
