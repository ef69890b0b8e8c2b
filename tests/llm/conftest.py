"""A warehouse in tmp_path, a simulator on loopback, and request builders."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest

from pipelines.resources.llm import LLMRequest
from pipelines.resources.warehouse import Warehouse
from pipelines.simulator import Simulator, running

MODEL = "claude-sonnet-4-6-20261015"
SUPPORT_SYSTEM = """You are Acme Outfitters's support assistant. Reply in {language}.
<document id="kb-refunds-02">
Orders can be refunded in full within 30 days of delivery. After 30 days, store credit only.
</document>"""


@pytest.fixture
def warehouse(tmp_path) -> Warehouse:
    return Warehouse(uri=str(tmp_path / "warehouse"))


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with running() as simulator:
        yield simulator


def chat(i: int, *, model: str = MODEL, temperature: float | None = 0.0, **body: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": model,
        "max_tokens": 200,
        "messages": [{"role": "user", "content": f"Where is my order number {i}?"}],
        **body,
    }
    if temperature is not None:
        out["temperature"] = temperature
    return out


def requests(n: int, mode: str = "pinned", **body: Any) -> list[LLMRequest]:
    return [LLMRequest(body=chat(i, **body), purpose="replay", mode=mode, candidate="c1") for i in range(n)]


def provider_batches(warehouse: Warehouse) -> pl.DataFrame:
    """``llm_batches`` without the write-ahead rows (``submit_<uuid>``) written before each create."""
    return warehouse.read("llm_batches").filter(~pl.col("batch_id").str.starts_with("submit_"))
