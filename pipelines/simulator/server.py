"""tracelake's Messages API simulator: real HTTP the real anthropic SDK talks to.

Routes (as the API has them): ``POST /v1/messages`` (JSON or, with
``"stream": true``, server-sent events), ``POST /v1/messages/count_tokens``,
``POST /v1/messages/batches``, ``GET /v1/messages/batches`` (list),
``GET /v1/messages/batches/{id}``, ``GET /v1/messages/batches/{id}/results``
(JSONL), ``POST /v1/messages/batches/{id}/cancel`` and
``DELETE /v1/messages/batches/{id}``. What the answers say is in
``behaviour.py``; faults in ``faults.py``; caching in ``prompt_cache.py``.

Usage is reported as the API reports it (``cache_read_input_tokens``,
``cache_creation_input_tokens``, ``service_tier: "batch"`` on batch results)
and ``bills`` keeps what each processed request would cost, at the batch
discount for batch entries. Everything is labelled simulated: ids start
``msg_sim_`` / ``msgbatch_sim_`` and every response has the header
``x-tracelake-simulated: true``. ``log`` holds one ``Received`` per HTTP
request, faulted ones included, for comparing a ledger with what arrived.

It behaves like the API as it is today (``today.py``): it reads the
``anthropic-version`` header and refuses what that version refuses, answers a
retired model with ``not_found_error``, enforces the batch limits (100,000
requests, 256 MB), keeps batch results for 29 days of its clock
(``advance(days=...)`` moves it) and caches a prefix only above the model's
minimum. A batch is processed when it is due whether or not anyone polls it,
as the provider does: ``bills`` includes batches nobody came back for.
``holds`` stops a batch create for a while before or after the batch is made
(``{"before_batch_create": s, "after_batch_create": s}``), so a test can kill
the client at that point; a create whose client is gone when the hold ends
is not made.
"""

from __future__ import annotations

import json
import random
import re
import select
import socket
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

from pipelines.llm.pricing import cost_usd
from pipelines.record.canonical import request_sha256
from pipelines.simulator import behaviour, sse
from pipelines.simulator import today as api
from pipelines.simulator.faults import ERRORS, Faults
from pipelines.simulator.loopback import LoopbackServer
from pipelines.simulator.prompt_cache import PromptCache

SIMULATED_HEADER = "x-tracelake-simulated"
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass(frozen=True)
class Received:
    """One HTTP request the simulator received and what it did with it."""

    method: str
    path: str
    route: str  # messages | count_tokens | batch_create | batch_retrieve | batch_results | batch_list | ...
    status: int  # 0: dropped unanswered (a timeout fault)
    fault: str | None
    retry_count: int  # the SDK's x-stainless-retry-count header
    body: dict[str, Any] | None
    response_id: str | None = None
    batch_id: str | None = None
    custom_ids: tuple[str, ...] = ()
    at: float = 0.0


@dataclass(frozen=True)
class Bill:
    """What one processed request costs, as the provider would bill it."""

    response_id: str
    model: str
    usage: dict[str, Any]
    cost_usd: float
    batch_id: str | None = None
    custom_id: str | None = None


@dataclass
class _Batch:
    id: str
    requests: list[dict[str, Any]]
    created_at: datetime
    ends_after: float
    expire: bool
    cancel_at: datetime | None = None
    results: list[dict[str, Any]] | None = None
    ended_at: datetime | None = None
    deleted: bool = False
    version: str = api.NEW_VERSION


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def _error(kind: str, message: str) -> dict[str, Any]:
    """The API's error body (with the request id it carries)."""
    return {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": f"req_sim_{uuid.uuid4().hex[:24]}",
    }


@dataclass
class Simulator(LoopbackServer):
    """Start with ``with Simulator() as sim:`` (or ``start()``); ``sim.url`` is its base URL."""

    faults: Faults = field(default_factory=Faults)
    seed: int = 0
    batch_seconds: float = 0.0
    cache_min_tokens: int | None = None
    host: str = "127.0.0.1"
    port: int = 0
    log: list[Received] = field(default_factory=list)
    # the date the API's retirements are judged on (None: today, UTC, plus advance())
    today: date | None = None
    # model family prefix -> parameters it refuses besides what today.py says (a refusal the
    # client's rules do not know, for testing how it is learned)
    refuses: dict[str, tuple[str, ...]] = field(default_factory=dict)
    max_batch_requests: int = api.MAX_BATCH_REQUESTS
    max_batch_bytes: int = api.MAX_BATCH_BYTES
    holds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # reentrant: processing a batch (under the lock) bills each entry (under the lock)
        self._lock = threading.RLock()
        self._seen: Counter[str] = Counter()
        self._batches: dict[str, _Batch] = {}
        self._cache = PromptCache(self.cache_min_tokens)
        self._bills: list[Bill] = []
        self._offset = timedelta()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    def env(self) -> dict[str, str]:
        """Environment variables that point ``Settings.from_env()`` at this simulator."""
        return {"TRACELAKE_LLM": "simulator", "TRACELAKE_LLM_URL": self.url}

    # -- what tests read --------------------------------------------------------------------------

    def received(self, route: str, status: int | None = None) -> list[Received]:
        return [r for r in self.log if r.route == route and (status is None or r.status == status)]

    @property
    def batch_ids(self) -> list[str]:
        return list(self._batches)

    def end_batches(self) -> None:
        """Let every batch in progress end now (a test's stand-in for waiting hours)."""
        with self._lock:
            for batch in self._batches.values():
                batch.ends_after = 0.0
        self.sweep()

    def advance(self, *, days: float = 0, hours: float = 0) -> None:
        """Move the simulator's clock forward (batch results expire after 29 days of it)."""
        with self._lock:
            self._offset += timedelta(days=days, hours=hours)

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset

    def date(self) -> date:
        return self.today or self.now().date()

    def sweep(self) -> None:
        """Process every batch that is due: the provider does, whether or not anyone polls."""
        with self._lock:
            for batch in self._batches.values():
                if batch.results is None and (batch.cancel_at is not None or time.monotonic() >= batch.ends_after):
                    self._process(batch)

    @property
    def bills(self) -> list[Bill]:
        """Every request processed and billed (due batches processed first)."""
        self.sweep()
        with self._lock:
            return list(self._bills)

    @property
    def billed_usd(self) -> float:
        return round(sum(b.cost_usd for b in self.bills), 8)

    def billed_custom_ids(self) -> Counter[str]:
        """How many times each batch custom_id was billed (more than once: paid twice)."""
        return Counter(b.custom_id for b in self.bills if b.custom_id is not None)

    def _record(self, entry: Received) -> None:
        with self._lock:
            self.log.append(entry)

    # -- the model --------------------------------------------------------------------------------

    def _rng(self, body: dict[str, Any]) -> random.Random:
        sha = request_sha256({k: v for k, v in body.items() if k != "stream"})
        temperature = body.get("temperature", 1.0)
        if temperature == 0:
            return random.Random(f"{self.seed}|{sha}")
        with self._lock:
            n = self._seen[sha]
            self._seen[sha] += 1
        return random.Random(f"{self.seed}|{sha}|{n}")

    def invalid(self, body: dict[str, Any], version: str = api.NEW_VERSION) -> tuple[int, str, str] | None:
        """(status, error type, message) the API refuses this Messages body with under ``version``, or None."""
        for name in ("model", "max_tokens", "messages"):
            if name not in body:
                return 400, "invalid_request_error", f"{name}: Field required"
        if not isinstance(body["messages"], list) or not body["messages"]:
            return 400, "invalid_request_error", "messages: at least one message is required"
        return api.refusal(body, version, self.date(), self.refuses)

    def message(self, body: dict[str, Any], *, batch_id: str | None = None, custom_id: str | None = None) -> dict:
        """A Messages response to ``body``, billed."""
        answer = behaviour.answer(body, self._rng(body))
        answer, output_tokens = behaviour.truncate_to(answer, int(body.get("max_tokens") or 0))
        cache_read, cache_write = self._cache.usage(body)
        usage = {
            "input_tokens": behaviour.input_tokens(body) - cache_read - cache_write,
            "output_tokens": output_tokens,
            "cache_read_input_tokens": cache_read,
            "cache_creation_input_tokens": cache_write,
            "service_tier": "batch" if batch_id else "standard",
        }
        message = {
            "id": f"msg_sim_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": answer.content,
            "stop_reason": answer.stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
        bill = Bill(message["id"], body["model"], usage, cost_usd(body["model"], usage), batch_id, custom_id)
        with self._lock:
            self._bills.append(bill)
        return message

    # -- batches ----------------------------------------------------------------------------------

    def create_batch(self, body: dict[str, Any], version: str, size: int) -> tuple[int, dict[str, Any]]:
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            return 400, _error("invalid_request_error", "requests: at least one request is required")
        if size > self.max_batch_bytes:
            return 413, _error("request_too_large", f"Request exceeds the maximum size of {self.max_batch_bytes} bytes")
        if len(requests) > self.max_batch_requests:
            problem = f"requests: a batch holds at most {self.max_batch_requests} requests, got {len(requests)}"
            return 400, _error("invalid_request_error", problem)
        ids = [r.get("custom_id") for r in requests]
        bad = next((c for c in ids if not isinstance(c, str) or not CUSTOM_ID.match(c)), None)
        if bad is not None or len(set(ids)) != len(ids):
            problem = f"custom_id {bad!r} must match ^[a-zA-Z0-9_-]{{1,64}}$" if bad else "custom_id values repeat"
            return 400, _error("invalid_request_error", problem)
        batch = _Batch(
            id=f"msgbatch_sim_{uuid.uuid4().hex[:24]}",
            requests=requests,
            created_at=self.now(),
            ends_after=time.monotonic() + self.batch_seconds,
            expire=self.faults.expire_next_batch(),
            version=version,
        )
        with self._lock:
            self._batches[batch.id] = batch
        return 200, self._batch_json(batch)

    def _process(self, batch: _Batch) -> None:
        results = []
        for i, item in enumerate(batch.requests):
            custom_id, params = item["custom_id"], item.get("params") or {}
            if batch.cancel_at is not None:
                result: dict[str, Any] = {"type": "canceled"}
            elif batch.expire and i % 2 == 1:
                result = {"type": "expired"}
            elif problem := self.invalid(params, batch.version):
                result = {"type": "errored", "error": _error(problem[1], problem[2])}
            elif kind := self.faults.batch_entry_error(custom_id):
                result = {"type": "errored", "error": _error(kind, f"{kind} while processing (simulated)")}
            else:
                message = self.message(params, batch_id=batch.id, custom_id=custom_id)
                result = {"type": "succeeded", "message": message}
            results.append({"custom_id": custom_id, "result": result})
        batch.results = results
        batch.ended_at = self.now()

    def archived(self, batch: _Batch) -> bool:
        """Whether the batch's results are past the download window (29 days after creation)."""
        return self.now() >= batch.created_at + timedelta(days=api.RESULTS_DAYS)

    def _batch_json(self, batch: _Batch) -> dict[str, Any]:
        self.sweep()
        ended = batch.results is not None
        archived = ended and self.archived(batch)
        counts = Counter(r["result"]["type"] for r in batch.results or [])
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": "ended" if ended else ("canceling" if batch.cancel_at else "in_progress"),
            "request_counts": {
                "processing": 0 if ended else len(batch.requests),
                "succeeded": counts["succeeded"],
                "errored": counts["errored"],
                "canceled": counts["canceled"],
                "expired": counts["expired"],
            },
            "created_at": _iso(batch.created_at),
            "ended_at": _iso(batch.ended_at),
            "expires_at": _iso(batch.created_at + timedelta(hours=24)),
            "cancel_initiated_at": _iso(batch.cancel_at),
            "archived_at": _iso(batch.created_at + timedelta(days=api.RESULTS_DAYS)) if archived else None,
            "results_url": f"{self.url}/v1/messages/batches/{batch.id}/results" if ended and not archived else None,
        }

    def batch(self, batch_id: str) -> _Batch | None:
        found = self._batches.get(batch_id)
        return None if found is None or found.deleted else found


def _handler(sim: Simulator) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # the request log is ``sim.log``
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self._route("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._route("POST")

        def do_DELETE(self) -> None:  # noqa: N802
            self._route("DELETE")

        def _route(self, method: str) -> None:
            if not sim.running:  # stopped: keep-alive connections must not go on being served
                self.close_connection = True
                return
            path = self.path.split("?", 1)[0].rstrip("/")
            body = None
            length = int(self.headers.get("content-length") or 0)
            if length:
                try:
                    body = json.loads(self.rfile.read(length))
                except json.JSONDecodeError as e:
                    self._reply(method, path, "invalid", None, 400, _error("invalid_request_error", f"body: {e}"))
                    return
            sim.sweep()
            route, batch_id = _route_of(method, path)
            self.api_version = self.headers.get("anthropic-version") or api.NEW_VERSION
            platform_model = _platform_model(method, path)
            if platform_model is not None:  # Bedrock's or Vertex's path to Messages: the model is in the path
                route, body = "messages", {**(body or {}), "model": platform_model}
                self.api_version = str(body.pop("anthropic_version", None) or self.api_version)
            if route is None:
                self._reply(method, path, "unknown", body, 404, _error("not_found_error", f"no route {method} {path}"))
                return
            fault = sim.faults.decide(route)
            if fault is not None and fault != "timeout":
                kind, message = ERRORS[int(fault)]
                self._reply(method, path, route, body, int(fault), _error(kind, message), fault=fault, batch=batch_id)
                return
            if fault == "timeout":
                self._record(method, path, route, body, 0, fault="timeout")  # logged on arrival, then hang
                time.sleep(sim.faults.timeout_seconds)
                self.close_connection = True
                return
            if batch_id is None:
                getattr(self, f"_{route}")(method, path, body or {})
                return
            batch = sim.batch(batch_id)
            if batch is None:
                self._reply(method, path, route, None, 404, _error("not_found_error", f"no batch {batch_id}"))
                return
            getattr(self, f"_{route}")(method, path, batch)

        # -- routes -------------------------------------------------------------------------------

        def _messages(self, method: str, path: str, body: dict[str, Any]) -> None:
            problem = sim.invalid(body, self.api_version)
            if problem:
                status, kind, message = problem
                self._reply(method, path, "messages", body, status, _error(kind, message))
                return
            message = sim.message(body)
            if body.get("stream"):
                data = sse.encode(sse.stream_events(message))
                self._send(200, data, "text/event-stream")
            else:
                self._send(200, json.dumps(message).encode(), "application/json")
            self._record(method, path, "messages", body, 200, response_id=message["id"])

        def _count_tokens(self, method: str, path: str, body: dict[str, Any]) -> None:
            problem = api.refusal(body, self.api_version, sim.date(), sim.refuses)
            if problem:
                status, kind, message = problem
                self._reply(method, path, "count_tokens", body, status, _error(kind, message))
                return
            self._reply(method, path, "count_tokens", body, 200, {"input_tokens": behaviour.input_tokens(body)})

        def _batch_create(self, method: str, path: str, body: dict[str, Any]) -> None:
            ids = tuple(r.get("custom_id") for r in body.get("requests") or [])
            size = int(self.headers.get("content-length") or 0)
            if not self._hold("before_batch_create", method, path, ids):
                return  # the client went away before the batch was made: nothing was created
            status, payload = sim.create_batch(body, self.api_version, size)
            if status == 200:
                self._hold("after_batch_create", method, path, ids, payload["id"])
            self._reply(method, path, "batch_create", body, status, payload, batch=payload.get("id"), custom_ids=ids)

        def _hold(self, point: str, method: str, path: str, ids: tuple, batch: str | None = None) -> bool:
            """Wait at ``point`` when ``sim.holds`` says so; False when the client has gone meanwhile."""
            seconds = sim.holds.get(point)
            if not seconds:
                return True
            self._record(method, path, "batch_create", None, 0, fault=f"held_{point}", batch=batch, custom_ids=ids)
            time.sleep(seconds)
            return not _closed(self.connection)

        def _batch_list(self, method: str, path: str, body: dict[str, Any]) -> None:
            query = dict(p.split("=", 1) for p in self.path.partition("?")[2].split("&") if "=" in p)
            batches = sorted((b for b in sim._batches.values() if not b.deleted), key=lambda b: b.created_at)
            batches.reverse()  # newest first, as the API lists them
            if "after_id" in query:
                ids = [b.id for b in batches]
                batches = batches[ids.index(query["after_id"]) + 1 :] if query["after_id"] in ids else []
            limit = int(query.get("limit", 20))
            page = [sim._batch_json(b) for b in batches[:limit]]
            payload = {
                "data": page,
                "has_more": len(batches) > limit,
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
            }
            self._reply(method, path, "batch_list", body, 200, payload)

        def _batch_retrieve(self, method: str, path: str, batch: _Batch) -> None:
            self._reply(method, path, "batch_retrieve", None, 200, sim._batch_json(batch), batch=batch.id)

        def _batch_results(self, method: str, path: str, batch: _Batch) -> None:
            if batch.results is None:
                problem = _error("invalid_request_error", f"batch {batch.id} is still in progress; no results yet")
                self._reply(method, path, "batch_results", None, 400, problem, batch=batch.id)
                return
            if sim.archived(batch):
                problem = _error("not_found_error", f"the results of batch {batch.id} are no longer available")
                self._reply(method, path, "batch_results", None, 404, problem, batch=batch.id)
                return
            data = "".join(json.dumps(r) + "\n" for r in batch.results).encode()
            self._send(200, data, "application/binary")
            self._record(method, path, "batch_results", None, 200, batch=batch.id)

        def _batch_cancel(self, method: str, path: str, batch: _Batch) -> None:
            if batch.results is None and batch.cancel_at is None:
                batch.cancel_at = datetime.now(UTC)
            self._reply(method, path, "batch_cancel", None, 200, sim._batch_json(batch), batch=batch.id)

        def _batch_delete(self, method: str, path: str, batch: _Batch) -> None:
            if batch.results is None:
                problem = _error("invalid_request_error", f"batch {batch.id} is in progress: cancel it first")
                self._reply(method, path, "batch_delete", None, 400, problem, batch=batch.id)
                return
            batch.deleted = True
            payload = {"id": batch.id, "type": "message_batch_deleted"}
            self._reply(method, path, "batch_delete", None, 200, payload, batch=batch.id)

        # -- plumbing -----------------------------------------------------------------------------

        def _send(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", f"req_sim_{uuid.uuid4().hex[:24]}")
            self.send_header(SIMULATED_HEADER, "true")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client is gone (killed): it never reads this
                self.close_connection = True

        def _reply(
            self,
            method: str,
            path: str,
            route: str,
            body: dict[str, Any] | None,
            status: int,
            payload: dict[str, Any],
            *,
            fault: str | None = None,
            batch: str | None = None,
            custom_ids: tuple[str, ...] = (),
        ) -> None:
            headers = {}
            if fault:
                ms = sim.faults.retry_after_ms
                headers = {"retry-after-ms": str(ms), "retry-after": str(max(1, -(-ms // 1000)))}
            self._send(status, json.dumps(payload).encode(), "application/json", headers)
            self._record(method, path, route, body, status, fault=fault, batch=batch, custom_ids=custom_ids)

        def _record(
            self,
            method: str,
            path: str,
            route: str,
            body: dict[str, Any] | None,
            status: int,
            *,
            fault: str | None = None,
            response_id: str | None = None,
            batch: str | None = None,
            custom_ids: tuple[str, ...] = (),
        ) -> None:
            retry = int(self.headers.get("x-stainless-retry-count") or 0)
            sim._record(
                Received(method, path, route, status, fault, retry, body, response_id, batch, custom_ids, time.time())
            )

    return Handler


# Messages as the SDK's Bedrock and Vertex clients send them (AnthropicBedrock,
# AnthropicVertex): the model in the path, ``anthropic_version`` in the body.
BEDROCK_PATH = re.compile(r"^/model/(?P<model>[^/]+)/invoke$")
VERTEX_PATH = re.compile(r"^/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/(?P<model>[^/:]+):rawPredict$")


def _closed(connection: socket.socket) -> bool:
    """Whether the client closed its end (a killed process's socket reads empty)."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _platform_model(method: str, path: str) -> str | None:
    """The model of a Bedrock or Vertex Messages request path, else None."""
    found = (BEDROCK_PATH.match(path) or VERTEX_PATH.match(path)) if method == "POST" else None
    return found["model"] if found else None


def _route_of(method: str, path: str) -> tuple[str | None, str | None]:
    """(route name, batch id) of a request path."""
    parts = path.strip("/").split("/")
    if parts[:2] != ["v1", "messages"]:
        return None, None
    rest = parts[2:]
    if not rest and method == "POST":
        return "messages", None
    if rest == ["count_tokens"] and method == "POST":
        return "count_tokens", None
    if rest[:1] != ["batches"]:
        return None, None
    if len(rest) == 1:
        return ("batch_create" if method == "POST" else "batch_list" if method == "GET" else None), None
    batch_id = rest[1]
    if len(rest) == 2:
        return {"GET": "batch_retrieve", "DELETE": "batch_delete"}.get(method), batch_id
    if rest[2:] == ["results"] and method == "GET":
        return "batch_results", batch_id
    if rest[2:] == ["cancel"] and method == "POST":
        return "batch_cancel", batch_id
    return None, None
