"""Fixtures for the redaction tests: the corpora, their canonical rows, keys,
and redactors built once per session (an analyzer takes a second to build)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from pipelines.formats import SourceRef, agent_events, frozen_call
from pipelines.redact.keys import KeyRing
from pipelines.redact.policy import EntityRule, Policy, load_policy
from pipelines.redact.redactor import Redactor
from tests.redact.labelled_corpus import Corpus, build_corpus

KEYS = KeyRing.from_secrets(
    hash_secret="test-hash-secret-0123456789abcdef",
    encryption={"k-test": "test-encryption-secret-0123456789abcdef"},
)
SOURCE = SourceRef(uri="mem://tests/redact.jsonl", key="redact.jsonl", etag="etag-1")


def rows_of(documents: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """Frozen-call documents -> canonical `calls` and `spans` rows, as ingest makes them."""
    data = "\n".join(json.dumps(d, ensure_ascii=False) for d in documents).encode()
    out = frozen_call.normalize(data, SOURCE, lines=True)
    assert not out.problems, [p.message for p in out.problems]
    return out.calls, out.spans


def event_rows(events: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    data = "\n".join(json.dumps(e, ensure_ascii=False) for e in events).encode()
    out = agent_events.normalize(data, SOURCE, lines=True)
    assert not out.problems, [p.message for p in out.problems]
    return out.calls, out.spans


def reversible_policy() -> Policy:
    """The default policy with credentials following the mode (default: always placeholders)."""
    policy = load_policy()
    return policy.model_copy(update={"entities": {**policy.entities, "CREDENTIAL": EntityRule(operator="mode")}})


@pytest.fixture(scope="session")
def corpus() -> Corpus:
    return build_corpus(traces=120, seed=7)


@pytest.fixture(scope="session")
def corpus_rows(corpus: Corpus) -> tuple[list[dict], list[dict]]:
    return rows_of(corpus.documents)


@pytest.fixture(scope="session")
def placeholder_redactor() -> Iterator[Redactor]:
    with Redactor(mode="placeholder", keys=KEYS, ner=False) as redactor:
        yield redactor


@pytest.fixture(scope="session")
def redacted_rows(placeholder_redactor: Redactor, corpus_rows):
    calls, spans = corpus_rows
    return placeholder_redactor.redact_rows(calls, spans)
