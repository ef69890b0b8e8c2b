"""Rows of ``llm_requests`` and ``llm_batches``, and reading them back.

The ledger is what makes the resource content-addressed: a request whose key
has a row here is answered from the row, not sent. ``warehouse`` is anything
with ``read`` and ``merge`` like ``pipelines.resources.warehouse.Warehouse``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Protocol

import polars as pl

from pipelines.llm.request import TERMINAL, LLMRequest, LLMResult, is_final
from pipelines.record.canonical import record_sha256

REQUESTS = "llm_requests"
BATCHES = "llm_batches"


class Ledger(Protocol):
    def read(self, name: str, where: pl.Expr | None = None, columns: Any = None) -> pl.DataFrame: ...
    def merge(self, name: str, rows: Any, **kwargs: Any) -> Any: ...


def now() -> datetime:
    return datetime.now(UTC)


def request_row(
    request: LLMRequest,
    result: LLMResult,
    *,
    backend: str,
    run_id: str,
    sent_at: datetime,
    latency_ms: float | None,
    sampling: dict[str, Any],
) -> dict[str, Any]:
    row = {
        "request_key": request.key,
        "request_sha256": request.request_sha256,
        "purpose": request.purpose,
        "mode": request.mode,
        "sample_index": request.sample_index,
        "candidate": request.candidate,
        "call_id": request.call_id,
        "model": result.model or request.model,
        "backend": backend,
        "batch_id": result.batch_id,
        "custom_id": request.custom_id if result.batch_id else None,
        "attempts": result.attempts,
        "status": result.status,
        "error": result.error,
        "stop_reason": result.stop_reason,
        "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens,
        "cache_read_input_tokens": result.cache_read_input_tokens,
        "cache_write_input_tokens": result.cache_write_input_tokens,
        "cost_usd": result.cost_usd,
        "latency_ms": latency_ms,
        "simulated": result.simulated,
        "sampling_json": json.dumps(sampling, sort_keys=True) if sampling else None,
        "response_json": json.dumps(result.response, ensure_ascii=False) if result.response is not None else None,
        "sent_at": sent_at,
        "sent_date": sent_at.date(),
        "run_id": run_id,
    }
    row["record_sha256"] = record_sha256(row, ignore=())
    return row


def result_from_row(row: dict[str, Any]) -> LLMResult:
    return LLMResult(
        key=row["request_key"],
        request_sha256=row["request_sha256"],
        status=row["status"],
        response=json.loads(row["response_json"]) if row["response_json"] else None,
        error=row["error"],
        model=row["model"],
        input_tokens=row["input_tokens"] or 0,
        output_tokens=row["output_tokens"] or 0,
        cache_read_input_tokens=row["cache_read_input_tokens"] or 0,
        cache_write_input_tokens=row["cache_write_input_tokens"] or 0,
        cost_usd=row["cost_usd"] or 0.0,
        batch_id=row["batch_id"],
        attempts=row["attempts"] or 0,
        simulated=bool(row["simulated"]),
        reused=True,
    )


def stored_results(ledger: Ledger, keys: Iterable[str]) -> dict[str, LLMResult]:
    """The final results already stored for ``keys``, by key: successes and
    permanent errors. A request that ran out of retries or expired is left out,
    so the next run sends it again (its ledger row is then updated in place)."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    frame = ledger.read(REQUESTS, where=pl.col("request_key").is_in(wanted) & pl.col("status").is_in(TERMINAL))
    return {
        row["request_key"]: result_from_row(row)
        for row in frame.iter_rows(named=True)
        if is_final(row["status"], row["error"])
    }


def batch_row(
    batch: dict[str, Any],
    keys: list[str],
    *,
    backend: str,
    simulated: bool,
    run_id: str,
    created_at: datetime,
) -> dict[str, Any]:
    """An ``llm_batches`` row from a MessageBatch (as a dict)."""
    counts = batch.get("request_counts") or {}
    ended = batch.get("ended_at")
    row = {
        "batch_id": batch["id"],
        "state": batch.get("processing_status"),
        "request_count": len(keys),
        "succeeded": counts.get("succeeded", 0),
        "errored": counts.get("errored", 0),
        "expired": counts.get("expired", 0),
        "canceled": counts.get("canceled", 0),
        "request_keys_json": json.dumps(sorted(keys)),
        "backend": backend,
        "simulated": simulated,
        "created_at": created_at,
        "ended_at": _ts(ended),
        "sent_date": created_at.date(),
        "run_id": run_id,
    }
    row["record_sha256"] = record_sha256(row, ignore=("record_sha256",))
    return row


def with_state(row: dict[str, Any], state: str) -> dict[str, Any]:
    """An ``llm_batches`` row read back, in another state (its content hash recomputed so the merge updates it)."""
    changed = {**row, "state": state}
    changed["record_sha256"] = record_sha256(changed, ignore=("record_sha256",))
    return changed


def _ts(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def open_batches(ledger: Ledger, backend: str) -> list[dict[str, Any]]:
    """Batches a run submitted and did not see end (a run killed while polling), oldest first."""
    open_states = ("in_progress", "canceling")
    frame = ledger.read(BATCHES, where=pl.col("state").is_in(open_states) & (pl.col("backend") == backend))
    return sorted(frame.iter_rows(named=True), key=lambda r: r["created_at"])
