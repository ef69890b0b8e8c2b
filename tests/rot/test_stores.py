"""Ingredient store files: read through the same interface from a folder and
from S3, validated with errors that name the file, the key and what was expected."""

from __future__ import annotations

from datetime import date

import pytest

from pipelines.demo import stores as demo
from pipelines.rot.store_files import StoreFileError, parse_models, parse_params, parse_template_metadata
from tests.rot.conftest import StoreAt, aged, fresh_stores


def test_stores_read_the_demo_layout(store: StoreAt):
    store.put(aged())
    r = store.resources()
    assert r["document_store"].current_snapshot() == demo.KB_REBUILT
    assert demo.DELETED_DOC not in r["document_store"].snapshot(demo.KB_REBUILT)
    models, models_sha = r["model_alias_store"].load()
    assert models.resolve(demo.AGENT_ALIAS, date(2026, 11, 1)) == demo.SONNET
    assert len(models_sha) == 64
    params, _ = r["params_store"].load()
    assert params.routes["support.answer"].as_request() == {"max_tokens": 1024, "temperature": 0.3}
    agent = r["template_store"].get(demo.AGENT_TEMPLATE, "v1")
    assert agent.tools == demo.AGENT_TOOLS and agent.params == {}
    assert agent.variables == {"company", "refund_limit", "currency", "language_name"}
    assert r["template_store"].get(demo.SUPPORT_TEMPLATE, "v9") is None
    assert r["template_store"].get(demo.TRIAGE_TEMPLATE, "v1").names >= {"now"}


def test_a_missing_required_file_says_which_and_where(store: StoreAt):
    store.put(fresh_stores())
    store.delete("documents/current.json")
    with pytest.raises(StoreFileError) as e:
        store.resources()["document_store"].current_snapshot()
    assert "documents/current.json" in str(e.value) and "current index snapshot" in str(e.value)
    assert store.uri in str(e.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"aliases: {}\n", "key version: Field required"),
        (b"version: 2\naliases: {}\n", "key version: Input should be 1"),
        (
            b"version: 1\naliases:\n  a:\n  - {snapshot: s1, effective_from: 2026-01-01}\n"
            b"  - {snapshot: s2, effective_from: 2026-02-01}\n",
            "alias 'a': the entry from 2026-01-01 overlaps the one from 2026-02-01",
        ),
        (
            b"version: 1\naliases:\n  a:\n  - {snapshot: s1, effective_from: yesterday}\n",
            "key aliases.a.0.effective_from: Input should be a valid date",
        ),
        (b"version: 1\naliases: [\n", "expected YAML, could not parse it at line"),
        (b"- just a list\n", "expected 'version: 1' and 'aliases"),
    ],
)
def test_models_yaml_errors_name_the_file_key_and_expectation(text, expected):
    with pytest.raises(StoreFileError) as e:
        parse_models(text, "stores/models.yaml")
    assert str(e.value).startswith("stores/models.yaml: ")
    assert expected in str(e.value)
    assert "Fix the file" in str(e.value)


def test_params_and_template_metadata_are_validated():
    with pytest.raises(StoreFileError, match=r"params.yaml: key routes.support.answer.max_tokens: .*greater than 0"):
        parse_params(b"version: 1\nroutes:\n  support.answer: {max_tokens: -5}\n", "params.yaml")
    extra = parse_params(b"version: 1\nroutes:\n  r: {max_tokens: 5, tool_choice: {type: auto}}\n", "params.yaml")
    assert extra.routes["r"].as_request() == {"max_tokens": 5, "tool_choice": {"type": "auto"}}
    with pytest.raises(StoreFileError, match=r"v1.yaml: key tool: Extra inputs are not permitted"):
        parse_template_metadata(b"tool: []\n", "templates/x/v1.yaml")
