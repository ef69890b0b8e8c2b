"""Every classification, from real ingredient stores on a local folder and on S3
(moto's server, real boto3): verified, rotted with each component, impure and
unverifiable with each missing ingredient."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pipelines.demo import stores as demo
from pipelines.rot.check import Checker, RotCheck
from tests.rot.conftest import (
    TODAY,
    StoreAt,
    aged,
    agent_call,
    fresh_stores,
    ingest,
    support_call,
    support_doc,
    triage_call,
)


def check(store: StoreAt, call: dict, clock=TODAY, **kw) -> RotCheck:
    return Checker(store.ingredients([call]), clock, **kw).check(call)


def verdict(result: RotCheck) -> tuple[str, list[str], list[str]]:
    return result.status, result.components, result.missing


def test_unchanged_stores_verify_on_every_run(store):
    stores = fresh_stores()
    store.put(stores)
    calls = [support_call(stores, version=v, span_id=v) for v in ("v1", "v2", "v3")] + [agent_call(stores)]
    for run in range(3):  # three runs, three clocks, a day apart
        clock = TODAY + timedelta(days=run, hours=run)
        results = Checker(store.ingredients(calls), clock).check_all(calls)
        for result in results:
            assert verdict(result) == ("verified", [], [])
            assert result.basis == "full_request"
            assert result.replay_fidelity == "exact"
            assert result.rerendered_sha256 == result.recorded_sha256


def test_a_changed_document_is_exactly_document_changed(store):
    stores = fresh_stores()
    # the record carries everything else a call can carry: PII in messages, feedback,
    # tool executions, tags, metadata, flags; none of it may be named
    calls = [support_call(stores, version=v, span_id=v) for v in ("v1", "v2", "v3")]
    calls.append(support_call(stores, version="v3", span_id="pt", doc_ids=("kb-pt-reembolso-01", demo.CHANGED_DOC)))
    rebuilt = fresh_stores()
    rebuilt.snapshots["kb-new"] = {**rebuilt.snapshots[demo.KB_SNAPSHOT]}
    rebuilt.snapshots["kb-new"][demo.CHANGED_DOC] += " Exceptions apply."
    rebuilt.current_snapshot = "kb-new"
    store.put(rebuilt)
    for run in range(2):
        for result in Checker(store.ingredients(calls), TODAY + timedelta(days=run)).check_all(calls):
            assert verdict(result) == ("rotted", ["document_changed"], [])
            assert result.rotted_blocks == ["document:kb-refunds-02", "system"]
            assert result.index_snapshot == "kb-new"
            assert result.replay_fidelity == "exact"  # the frozen bytes still replay exactly


def test_a_deleted_document_is_document_missing(store):
    stores = fresh_stores()
    call = support_call(stores, doc_ids=("kb-shipping-01", demo.DELETED_DOC))
    store.put(aged())
    assert verdict(check(store, call)) == ("rotted", ["document_missing"], [])


def test_a_template_edited_in_place_is_template_changed_and_documents_are_told_apart(store):
    stores = fresh_stores()
    plain = support_call(stores, version=demo.EDITED_VERSION, doc_ids=("kb-billing-01",), span_id="a")
    both = support_call(stores, version=demo.EDITED_VERSION, doc_ids=(demo.CHANGED_DOC,), span_id="b")
    store.put(aged())
    assert verdict(check(store, plain)) == ("rotted", ["template_changed"], [])
    assert verdict(check(store, both)) == ("rotted", ["template_changed", "document_changed"], [])


def test_a_template_version_gone_from_the_store_is_template_missing(store):
    stores = fresh_stores()
    call = support_call(stores, version="v1")
    store.put(stores)
    store.delete("templates/support-answer/v1.j2")
    store.write({"params.yaml": b"version: 1\nroutes: {}\n"})  # not judged without the version's metadata
    result = check(store, call)
    assert verdict(result) == ("rotted", ["template_missing"], [])
    assert result.rerendered_sha256 is None and result.template_sha256 is None


def test_a_moved_alias_is_model_alias_moved(store):
    stores = fresh_stores()
    call = agent_call(stores)
    store.put(aged())
    result = check(store, call)
    assert verdict(result) == ("rotted", ["model_alias_moved"], [])
    assert result.model_snapshot == demo.SONNET_NEXT
    # the day before the move, the alias still pointed at the recorded snapshot
    assert verdict(check(store, call, clock=TODAY - timedelta(days=1))) == ("verified", [], [])


def test_changed_route_params_are_params_changed(store):
    stores = fresh_stores()
    call = support_call(stores)
    stores.params["support.answer"]["temperature"] = 0.7
    store.put(stores)
    result = check(store, call)
    assert verdict(result) == ("rotted", ["params_changed"], [])
    assert any("temperature" in line for line in result.detail)


def test_params_from_template_metadata_are_overridden_by_the_route(store):
    stores = fresh_stores()
    call = support_call(stores)
    store.put(stores)
    # a version default the route's config overrides changes nothing
    store.write({"templates/support-answer/v3.yaml": b"params: {temperature: 0.9, max_tokens: 1024}\n"})
    assert verdict(check(store, call)) == ("verified", [], [])
    # a default the route does not set reaches the request
    store.write({"templates/support-answer/v3.yaml": b"params: {top_k: 5}\n"})
    assert verdict(check(store, call)) == ("rotted", ["params_changed"], [])


def test_changed_tool_definitions_are_tools_changed(store):
    stores = fresh_stores()
    call = agent_call(stores)
    stores.template_tools[demo.AGENT_TEMPLATE]["v1"][1]["description"] = "Refund an order (max 500 USD)."
    store.put(stores)
    assert verdict(check(store, call)) == ("rotted", ["tools_changed"], [])


def test_a_template_that_prints_the_date_is_impure(store):
    stores = fresh_stores()
    call = triage_call(stores)
    store.put(stores)
    result = check(store, call)
    assert verdict(result) == ("impure", [], [])
    # whatever else moved is still named
    moved = fresh_stores()
    moved.params["support.triage"]["max_tokens"] = 32
    store.put(moved)
    assert verdict(check(store, call)) == ("impure", ["params_changed"], [])


def test_a_template_that_draws_random_numbers_is_impure(store):
    stores = fresh_stores()
    stores.templates[demo.AGENT_TEMPLATE]["v1"] += "\nSession tag: {{ (random() * 1000) | int }}"
    call = agent_call(stores)
    store.put(stores)
    assert check(store, call).status == "impure"


def test_a_template_that_needs_a_variable_the_record_lacks_is_template_changed(store):
    stores = fresh_stores()
    call = agent_call(stores)
    stores.templates[demo.AGENT_TEMPLATE]["v1"] += "\nEscalation desk: {{ desk_phone }}"
    store.put(stores)
    result = check(store, call)
    assert verdict(result) == ("rotted", ["template_changed"], [])
    assert any("desk_phone" in line and "undefined" in line for line in result.detail)


@pytest.mark.parametrize(
    ("change", "missing"),
    [
        (lambda doc: doc.update(prompt=None), ["template_version"]),
        (lambda doc: doc["prompt"].update(version=None), ["template_version"]),
        (lambda doc: doc.update(rendered_request_sha256=None), ["recorded_hash"]),
        (lambda doc: doc.update(retrieval=None), ["doc_ids"]),
        (lambda doc: doc["prompt"].update(variables=None), ["template_variables"]),
        (lambda doc: doc.update(request=None), ["request"]),
        (lambda doc: doc.update(rendered_request_sha256="0" * 64), ["request_matching_hash"]),
    ],
)
def test_calls_missing_an_ingredient_are_unverifiable(store, change, missing):
    stores = fresh_stores()
    store.put(stores)
    base = support_call(stores)
    doc = support_doc(stores)
    change(doc)
    call = ingest(doc)
    assert call["call_id"] == base["call_id"]
    result = check(store, call)
    assert verdict(result) == ("unverifiable", [], missing)
    assert result.basis == "none"


def test_checking_keeps_recorded_and_rerendered_blocks_for_diffs(store):
    stores = fresh_stores()
    call = support_call(stores, version=demo.EDITED_VERSION, doc_ids=(demo.CHANGED_DOC,))
    store.put(aged())
    result = check(store, call, keep_blocks=True)
    assert "Never promise a refund" in result.recorded_blocks["system"]
    assert "Do not promise any refund or credit" in result.rerendered_blocks["system"]
    assert "30 days" in result.recorded_blocks[f"document:{demo.CHANGED_DOC}"]
    assert "14 days" in result.rerendered_blocks[f"document:{demo.CHANGED_DOC}"]
