"""Ingredient stores on a local folder or on S3 (moto's server), and calls
recorded the way an application renders them (pipelines.rot.render) and
ingested the way tracelake ingests them (the frozen-call format)."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pipelines.demo import stores as demo
from pipelines.formats.base import SourceRef
from pipelines.formats.frozen_call import FrozenCallV1, to_call
from pipelines.record.canonical import request_sha256
from pipelines.resources.stores import (
    DocumentStore,
    ModelAliasStore,
    ParamsStore,
    TemplateStore,
    load_ingredients,
)
from pipelines.rot.ingredients import Ingredients
from pipelines.rot.render import build_request, render_template

CAPTURED = datetime(2026, 11, 2, 14, 30, tzinfo=UTC)
TODAY = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


@dataclass
class StoreAt:
    """An ingredient store at a folder or an S3 prefix, written file by file."""

    uri: str
    endpoint_url: str | None = None
    client: Any = None
    bucket: str | None = None
    prefix: str = ""

    def write(self, files: dict[str, bytes]) -> None:
        for key, data in files.items():
            if self.client is not None:
                self.client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)
            else:
                path = Path(self.uri) / key
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)

    def delete(self, key: str) -> None:
        if self.client is not None:
            self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)
        else:
            (Path(self.uri) / key).unlink()

    def put(self, stores: demo.Stores) -> None:
        self.write(stores.files())

    def resources(self) -> dict[str, Any]:
        where = {"uri": self.uri, "endpoint_url": self.endpoint_url, "region": "us-east-1"}
        return {
            "template_store": TemplateStore(**where),
            "document_store": DocumentStore(**where),
            "model_alias_store": ModelAliasStore(**where),
            "params_store": ParamsStore(**where),
        }

    def ingredients(self, calls: Iterable[dict[str, Any]]) -> Ingredients:
        r = self.resources()
        versions = {(c["template_id"], c["template_version"]) for c in calls if c.get("template_version")}
        return load_ingredients(
            r["template_store"], r["document_store"], r["model_alias_store"], r["params_store"], versions
        )


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path) -> StoreAt:
    if request.param == "local":
        return StoreAt(str(tmp_path / "stores"))
    s3 = request.getfixturevalue("s3")
    return StoreAt(s3.uri("stores"), s3.endpoint_url, s3.client(), s3.bucket, "stores/")


def fresh_stores() -> demo.Stores:
    """The capture-time stores, deep-copied: the demo's tool list is module state."""
    return copy.deepcopy(demo.capture_time_stores())


def aged() -> demo.Stores:
    """The stores after life happened; the agent alias moved today."""
    return copy.deepcopy(demo.aged_stores(moved_on=TODAY.date()))


def support_call(stores: demo.Stores, **kwargs: Any) -> dict[str, Any]:
    """A support.answer call as the demo app records it, then ingested: a `calls` row."""
    return ingest(support_doc(stores, **kwargs))


def support_doc(
    stores: demo.Stores,
    *,
    version: str = "v3",
    doc_ids: tuple[str, ...] = ("kb-refunds-01", "kb-refunds-02", "kb-billing-03"),
    span_id: str = "s1",
    **extra: Any,
) -> dict[str, Any]:
    """The frozen-call document of a support.answer call, with PII where production has it."""
    variables = {"company": "Acme", "language_name": "English", "customer_tier": "vip"}
    snapshot = stores.snapshots[stores.current_snapshot]
    docs = [{"doc_id": d, "text": snapshot[d], "score": 0.9 - i / 10} for i, d in enumerate(doc_ids)]
    system = render_template(stores.templates[demo.SUPPORT_TEMPLATE][version], variables, docs, clock=CAPTURED)
    model = stores.resolve(demo.SUPPORT_ALIAS, CAPTURED.date())
    messages = [{"role": "user", "content": "I'm Ana Souza, card 4111 1111 1111 1111. Refund please?"}]
    request = build_request(
        model=model,
        system=system,
        messages=messages,
        params=stores.params["support.answer"],
        metadata={"user_id": "u1"},
    )
    doc = {
        "trace_id": f"t-{span_id}",
        "span_id": span_id,
        "occurred_at": CAPTURED.isoformat(),
        "service": "support.answer",
        "user_id": "u1",
        "tags": ["vip", "billing"],
        "segment": {"user_tier": "vip", "language": "en"},
        "prompt": {"template_id": demo.SUPPORT_TEMPLATE, "version": version, "label": "prod", "variables": variables},
        "model": {"id": model, "alias": demo.SUPPORT_ALIAS, "resolved_snapshot": model},
        "request": request,
        "rendered_request_sha256": request_sha256(request),
        "retrieval": {
            "index_snapshot": stores.current_snapshot,
            "doc_ids": [d["doc_id"] for d in docs],
            "scores": [d["score"] for d in docs],
            "texts": [d["text"] for d in docs],
        },
        "response": {"id": "msg_1", "model": model, "content": [{"type": "text", "text": "Done."}]},
        "feedback": {"value": "down", "comment": "call me at +55 11 98765-4321"},
        "eval_score": 1.5,
        "flags": ["escalated_by_rule"],
        "tool_executions": [{"tool_call_id": "tc1", "name": "crm", "arguments": {"q": "x"}, "result": {"ok": 1}}],
    }
    doc.update(extra)
    return doc


def agent_call(stores: demo.Stores, *, span_id: str = "a1", **extra: Any) -> dict[str, Any]:
    """An agent.orders call: a template with tools from its version metadata, no documents."""
    variables = {"company": "Acme", "refund_limit": 200, "currency": "USD", "language_name": "English"}
    system = render_template(stores.templates[demo.AGENT_TEMPLATE]["v1"], variables, clock=CAPTURED)
    model = stores.resolve(demo.AGENT_ALIAS, CAPTURED.date())
    request = build_request(
        model=model,
        system=system,
        messages=[{"role": "user", "content": "Order A-1 arrived broken."}],
        params=stores.params["agent.orders"],
        tools=stores.template_tools[demo.AGENT_TEMPLATE]["v1"],
    )
    doc = {
        "trace_id": f"t-{span_id}",
        "span_id": span_id,
        "occurred_at": CAPTURED.isoformat(),
        "service": "agent.orders",
        "prompt": {"template_id": demo.AGENT_TEMPLATE, "version": "v1", "variables": variables},
        "model": {"id": model, "alias": demo.AGENT_ALIAS, "resolved_snapshot": model},
        "request": request,
        "rendered_request_sha256": request_sha256(request),
    }
    doc.update(extra)
    return ingest(doc)


def triage_call(stores: demo.Stores, *, span_id: str = "r1") -> dict[str, Any]:
    system = render_template(stores.templates[demo.TRIAGE_TEMPLATE]["v1"], {}, clock=CAPTURED)
    model = stores.resolve("triage-default", CAPTURED.date())
    request = build_request(
        model=model, system=system, messages=[{"role": "user", "content": "hi"}], params=stores.params["support.triage"]
    )
    return ingest(
        {
            "trace_id": f"t-{span_id}",
            "span_id": span_id,
            "occurred_at": CAPTURED.isoformat(),
            "service": "support.triage",
            "prompt": {"template_id": demo.TRIAGE_TEMPLATE, "version": "v1", "variables": {}},
            "model": {"id": model, "alias": "triage-default"},
            "request": request,
            "rendered_request_sha256": request_sha256(request),
        }
    )


def ingest(doc: dict[str, Any]) -> dict[str, Any]:
    source = SourceRef(uri="mem://calls.jsonl", key="calls.jsonl", etag="e1")
    return to_call(FrozenCallV1.model_validate(copy.deepcopy(doc)), source, 1)
