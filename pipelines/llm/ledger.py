"""Rows of ``llm_requests`` and ``llm_batches``, and reading them back.

The ledger is what makes the resource content-addressed: a request whose key
has a final row here is answered from the row, not sent. ``warehouse`` is
anything with ``read`` and ``merge`` like ``pipelines.resources.warehouse.Warehouse``.

Batches are written ahead: a ``creating`` row (``batch_id`` ``submit_<uuid>``,
the request keys) goes in before ``batches.create`` is called, so a run killed
between the provider accepting a batch and the batch's own row being written
leaves a trace the next run adopts the provider's batch from (by custom_id)
instead of paying for the same requests twice.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import polars as pl

from pipelines.llm.request import LLMRequest, LLMResult
from pipelines.record.canonical import record_sha256

REQUESTS = "llm_requests"
BATCHES = "llm_batches"
# llm_batches states
CREATING, CREATED, NOT_CREATED = "creating", "created", "not_created"
OPEN_STATES = ("in_progress", "canceling")
RESULTS_EXPIRED, NOT_FOUND = "results_expired", "not_found"


class Ledger(Protocol):
    def read(self, name: str, where: pl.Expr | None = None, columns: Any = None) -> pl.DataFrame: ...
    def merge(self, name: str, rows: Any, **kwargs: Any) -> Any: ...


def now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Sending:
    """What a request became on the wire: the API version, what was removed, the bytes' hash."""

    api_version: str | None = None
    sent_request_sha256: str | None = None
    dropped: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class History:
    """What earlier runs did with a request that is being sent again."""

    runs: int = 0
    attempts: int = 0
    entries: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, row: dict[str, Any] | None) -> History:
        if row is None:
            return cls()
        entries = tuple(json.loads(row["attempts_json"])) if row.get("attempts_json") else ()
        if not entries:  # a row written before attempts were kept: its one run, as a summary
            entries = (
                {
                    "run_id": row["run_id"],
                    "at": _iso(row["sent_at"]),
                    "via": row["batch_id"] or "direct",
                    "status": row["status"],
                    "error": row["error"],
                },
            )
        return cls(row.get("runs") or 1, row.get("attempts") or 0, entries)


@dataclass(frozen=True)
class Unclaimed:
    """A result of a resumed batch that no request of the run asked for (billed all the same)."""

    custom_id: str
    batch_id: str
    result: dict[str, Any]
    simulated: bool


def unclaimed_row(item: Unclaimed, *, backend: str, run_id: str) -> dict[str, Any]:
    """The ``llm_requests`` row of an unclaimed batch result: keyed by its custom_id (the request key),
    ``purpose`` ``unclaimed``; a later run that asks for the request finds it answered."""
    from pipelines.llm.pricing import cost_usd

    message = item.result.get("message") if item.result.get("type") == "succeeded" else None
    usage = (message or {}).get("usage") or {}
    error = (item.result.get("error") or {}).get("error") or {}
    at = now()
    row = {
        "request_key": item.custom_id,
        "purpose": "unclaimed",
        "model": (message or {}).get("model"),
        "backend": backend,
        "batch_id": item.batch_id,
        "custom_id": item.custom_id,
        "attempts": 1,
        "status": item.result.get("type") if message is None else "succeeded",
        "error": f"batch {error.get('type')}: {error.get('message')}" if error else None,
        "stop_reason": (message or {}).get("stop_reason"),
        "input_tokens": usage.get("input_tokens") or 0,
        "output_tokens": usage.get("output_tokens") or 0,
        "cache_read_input_tokens": usage.get("cache_read_input_tokens") or 0,
        "cache_write_input_tokens": usage.get("cache_creation_input_tokens") or 0,
        "cost_usd": cost_usd((message or {}).get("model"), usage, batch=True) if message else 0.0,
        "simulated": item.simulated,
        "response_json": json.dumps(message, ensure_ascii=False) if message is not None else None,
        "sent_at": at,
        "sent_date": at.date(),
        "run_id": run_id,
        "runs": 1,
    }
    return sealed(row)


def _iso(value: Any) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def request_row(
    request: LLMRequest,
    result: LLMResult,
    *,
    backend: str,
    run_id: str,
    sent_at: datetime,
    latency_ms: float | None,
    sampling: dict[str, Any],
    sending: Sending,
    attempts: Sequence[dict[str, Any]] = (),
    history: History = History(),
) -> dict[str, Any]:
    entries = [*history.entries, *attempts]
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
        "attempts": history.attempts + result.attempts,
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
        "api_version": sending.api_version,
        "sent_request_sha256": sending.sent_request_sha256,
        "dropped_json": json.dumps(sending.dropped, sort_keys=True) if sending.dropped else None,
        "substituted_from": request.substituted_from,
        "runs": history.runs + 1,
        "attempts_json": json.dumps(entries, sort_keys=True, default=str) if entries else None,
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
        dropped=tuple(sorted(json.loads(row["dropped_json"]))) if row.get("dropped_json") else (),
        runs=row.get("runs") or 1,
    )


def stored_rows(ledger: Ledger, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The ``llm_requests`` rows of ``keys`` (one per key), whatever their status."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    frame = ledger.read(REQUESTS, where=pl.col("request_key").is_in(wanted))
    return {row["request_key"]: row for row in frame.iter_rows(named=True)}


def run_spend(ledger: Ledger, run_id: str) -> tuple[int, float]:
    """(requests, USD) this run has been billed for so far: its rows in ``llm_requests``,
    plus the estimate of its batches still open (their results are not rows yet)."""
    sent = ledger.read(REQUESTS, where=pl.col("run_id") == run_id, columns=["cost_usd"])
    open_ = ledger.read(
        BATCHES,
        where=(pl.col("run_id") == run_id) & pl.col("state").is_in([*OPEN_STATES, CREATING]),
        columns=["request_count", "estimated_usd"],
    )
    usd = float(sent["cost_usd"].sum() or 0.0) + float(open_["estimated_usd"].fill_null(0.0).sum() or 0.0)
    return sent.height + int(open_["request_count"].sum() or 0), usd


def batch_row(
    batch: dict[str, Any],
    keys: Sequence[str],
    *,
    backend: str,
    simulated: bool,
    run_id: str,
    created_at: datetime,
    linked: str | None = None,
    request_bytes: int | None = None,
    estimated_usd: float | None = None,
    adopted: bool = False,
    state: str | None = None,
) -> dict[str, Any]:
    """An ``llm_batches`` row from a MessageBatch (as a dict)."""
    counts = batch.get("request_counts") or {}
    ended = batch.get("ended_at")
    row = {
        "batch_id": batch["id"],
        "state": state or batch.get("processing_status"),
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
        "linked_batch_id": linked,
        "request_bytes": request_bytes,
        "estimated_usd": estimated_usd,
        "adopted": adopted,
    }
    return sealed(row)


def write_ahead(
    keys: Sequence[str], *, backend: str, run_id: str, request_bytes: int, estimated_usd: float
) -> dict[str, Any]:
    """The row written before ``batches.create``: the keys about to be submitted, state ``creating``."""
    at = now()
    return batch_row(
        {"id": f"submit_{uuid.uuid4().hex}"},
        keys,
        backend=backend,
        simulated=False,
        run_id=run_id,
        created_at=at,
        request_bytes=request_bytes,
        estimated_usd=estimated_usd,
        state=CREATING,
    )


def sealed(row: dict[str, Any]) -> dict[str, Any]:
    row["record_sha256"] = record_sha256(row, ignore=("record_sha256",))
    return row


def with_state(row: dict[str, Any], state: str, **changes: Any) -> dict[str, Any]:
    """An ``llm_batches`` row read back, in another state (its content hash recomputed so the merge updates it)."""
    return sealed({**row, "state": state, **changes})


def _ts(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def open_batches(ledger: Ledger, backend: str) -> list[dict[str, Any]]:
    """Batches a run submitted and did not see end (a run killed while polling), and
    write-ahead rows of batches a run was creating when it died; oldest first."""
    frame = ledger.read(BATCHES, where=pl.col("state").is_in([*OPEN_STATES, CREATING]) & (pl.col("backend") == backend))
    return sorted(frame.iter_rows(named=True), key=lambda r: r["created_at"])


def settled(ledger: Ledger, backend: str, answered: Mapping[str, LLMResult]) -> list[dict[str, Any]]:
    """Open batches every request of which the ledger answers, as ``ended`` rows: a run died after
    recording their results and before marking them (nothing is asked of the provider)."""
    out = []
    for row in open_batches(ledger, backend):
        keys = json.loads(row["request_keys_json"])
        if row["state"] == CREATING or not keys or not all(k in answered for k in keys):
            continue
        counts = Counter(answered[k].status for k in keys)
        out.append(with_state(row, "ended", **{k: counts[k] for k in ("succeeded", "errored", "expired", "canceled")}))
    return out


def known_batch_ids(ledger: Ledger) -> set[str]:
    """Every provider batch id the ledger holds (adoption skips them)."""
    frame = ledger.read(BATCHES, columns=["batch_id"])
    return set(frame["batch_id"].to_list())
