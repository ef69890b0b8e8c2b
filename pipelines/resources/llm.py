"""The one LLM resource (CONTRACTS.md section 1): every model call goes through it.

It builds an anthropic SDK client for the configured backend and runs the
requests through ``pipelines.llm.runner``: content-addressed against the
``llm_requests`` ledger, estimated against a budget before anything is sent,
sent as Message Batches or one by one with retries, and recorded.

Backends: ``api`` (``ANTHROPIC_API_KEY``, optional ``ANTHROPIC_BASE_URL``),
``bedrock`` (``AnthropicBedrock``, AWS credentials from the environment),
``vertex`` (``AnthropicVertex``, Google credentials from the environment),
``simulator`` (tracelake's own server, ``pipelines.simulator``) and ``off``.
Secrets are never config values: the key is read from the environment
variable named by ``api_key_env`` when the client is built.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field, PrivateAttr

from pipelines.llm.params import Translator
from pipelines.llm.request import BudgetExceeded, Estimate, LLMRequest, LLMResult
from pipelines.resources.warehouse import Warehouse

if TYPE_CHECKING:  # the SDK takes about a second to import: only what calls a model pays for it
    import anthropic

    from pipelines.llm.lifecycle import Lifecycle
    from pipelines.llm.runner import Plan, SendOptions

__all__ = ["LLM", "BudgetExceeded", "Estimate", "LLMRequest", "LLMResult"]

BACKENDS = ("simulator", "api", "bedrock", "vertex", "off")
SIMULATOR_KEY = "sk-tracelake-simulator"


class LLM(dg.ConfigurableResource):
    """Anthropic models through the SDK, with a ledger, a budget and batches."""

    backend: str = Field(default="off", description="simulator | api | bedrock | vertex | off")
    base_url: str | None = Field(default=None, description="API base URL (the simulator's URL for 'simulator')")
    api_key_env: str = Field(default="ANTHROPIC_API_KEY", description="environment variable holding the API key")
    aws_region: str | None = None
    vertex_project: str | None = None
    vertex_region: str | None = None
    max_retries: int = Field(default=6, description="SDK retries per request (429, 529, 5xx, timeouts)")
    timeout_seconds: float = 600.0
    max_workers: int = Field(default=8, description="concurrent requests when not batching")
    poll_interval_seconds: float = Field(default=30.0, description="seconds between batch status polls")
    batch_rounds: int = Field(default=3, description="batch submissions per request and run before it is given up")
    retry_runs: int = Field(default=3, description="runs a failing request is sent in before its error is final")
    max_batch_requests: int = Field(default=100_000, description="requests per batch (the API's limit: 100,000)")
    max_batch_bytes: int = Field(default=256 * 1024 * 1024, description="bytes per batch (the API's limit: 256 MB)")
    flush_every: int = Field(default=200, description="ledger rows per Delta commit (direct requests)")
    token_counting: str = Field(default="estimate", description="estimate | api (messages.count_tokens)")
    budget_usd: float | None = Field(
        default=None, description="the cap in USD of one run, across every LLM stage of it (None: no cap)"
    )
    api_version: str | None = Field(
        default=None, description="anthropic-version header (None: the SDK's own, 2026-10-21 for anthropic 2.14)"
    )
    lifecycle_path: str | None = Field(
        default=None, description="a deployment's model lifecycle YAML layered on the shipped one"
    )
    _translators: dict[str, Translator] = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def available(self) -> bool:
        return self.backend != "off"

    @property
    def sent_api_version(self) -> str:
        """The anthropic-version this resource sends."""
        if self.api_version:
            return self.api_version
        from anthropic._constants import ANTHROPIC_API_VERSION

        return ANTHROPIC_API_VERSION

    def translator(self, run_id: str) -> Translator:
        """The run's translator: what it learns from a 400 holds for the rest of the run."""
        with self._lock:
            found = self._translators.get(run_id)
            if found is None:
                found = self._translators[run_id] = Translator(self.sent_api_version)
            return found

    def lifecycle(self) -> Lifecycle:
        from pipelines.llm.lifecycle import load

        return load(self.lifecycle_path)

    def cap(self, budget_usd: float | None = None) -> float | None:
        """The run's cap: the lower of the resource's (TRACELAKE_LLM_BUDGET_USD) and the caller's."""
        caps = [c for c in (self.budget_usd, budget_usd) if c is not None]
        return min(caps) if caps else None

    @property
    def simulated(self) -> bool:
        return self.backend == "simulator"

    def client(self) -> anthropic.Anthropic:
        """An SDK client for the backend; the key is read from the environment now."""
        import anthropic

        if self.backend not in BACKENDS:
            raise ValueError(f"LLM backend {self.backend!r} is not one of {', '.join(BACKENDS)}; set TRACELAKE_LLM")
        common = {"max_retries": self.max_retries, "timeout": self.timeout_seconds}
        if self.api_version:
            common["default_headers"] = {"anthropic-version": self.api_version}
        if self.backend == "off":
            raise RuntimeError(
                "the LLM resource is off: set ANTHROPIC_API_KEY, or TRACELAKE_LLM=simulator|api|bedrock|vertex"
            )
        if self.backend == "simulator":
            if not self.base_url:
                raise ValueError("the simulator backend needs base_url (TRACELAKE_LLM_URL); start one first")
            return anthropic.Anthropic(api_key=SIMULATOR_KEY, base_url=self.base_url, **common)
        # base_url for Bedrock and Vertex: a private endpoint, or the simulator in tests
        if self.backend == "bedrock":
            return anthropic.AnthropicBedrock(aws_region=self.aws_region, base_url=self.base_url, **common)
        if self.backend == "vertex":
            return anthropic.AnthropicVertex(
                project_id=self.vertex_project,
                region=self.vertex_region,
                base_url=self.base_url,
                # a token from the environment (short-lived, e.g. `gcloud auth print-access-token`);
                # unset: Google's default credentials
                access_token=os.environ.get("ANTHROPIC_VERTEX_ACCESS_TOKEN"),
                **common,
            )
        key = os.environ.get(self.api_key_env)
        if not key:
            raise RuntimeError(f"the LLM backend 'api' needs an API key in ${self.api_key_env}")
        return anthropic.Anthropic(api_key=key, base_url=self.base_url, **common)

    def _options(self) -> SendOptions:
        from pipelines.llm.runner import SendOptions

        return SendOptions(
            backend=self.backend,
            max_retries=self.max_retries,
            max_workers=self.max_workers,
            poll_interval=self.poll_interval_seconds,
            batch_rounds=self.batch_rounds,
            max_batch_requests=self.max_batch_requests,
            max_batch_bytes=self.max_batch_bytes,
            flush_every=self.flush_every,
            retry_runs=self.retry_runs,
            # Message Batches here are the Anthropic API's; Bedrock and Vertex batch differently
            supports_batches=self.backend in ("api", "simulator"),
        )

    def _counter(self) -> Callable[[LLMRequest], int] | None:
        """``count_tokens`` per request (token_counting="api"); the client is built on first use."""
        if self.token_counting != "api" or self.backend not in ("api", "simulator"):
            return None
        clients: list[anthropic.Anthropic] = []

        def count(request: LLMRequest) -> int:
            if not clients:
                clients.append(self.client())
            fields = {
                k: request.body[k] for k in ("model", "system", "messages", "tools", "tool_choice") if k in request.body
            }
            return clients[0].messages.count_tokens(**fields).input_tokens

        return count

    def plan(self, requests: Sequence[LLMRequest], warehouse: Warehouse, *, batch: bool = True) -> Plan:
        """What the ledger answers, what would be sent and what that could cost (nothing is sent)."""
        from pipelines.llm import runner

        options = self._options()
        use_batch = batch and options.supports_batches
        return runner.plan(
            requests, warehouse, batch=use_batch, retry_runs=self.retry_runs, count_tokens=self._counter()
        )

    def estimate(self, requests: Sequence[LLMRequest], warehouse: Warehouse, *, batch: bool = True) -> Estimate:
        """What sending the requests not answered yet could cost at most (nothing is sent)."""
        return self.plan(requests, warehouse, batch=batch).estimate

    def run(
        self,
        requests: Sequence[LLMRequest],
        warehouse: Warehouse,
        *,
        run_id: str,
        batch: bool = True,
        budget_usd: float | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> Iterator[LLMResult]:
        """One result per distinct request key, in any order (match them by ``key``).

        Requests answered in the ledger need no client: a backend that is off, or has no
        key, fails only when something has to be sent. ``budget_usd`` lowers the run's cap
        (it never raises the resource's)."""
        from pipelines.llm import runner

        return runner.run(
            self.client,
            requests,
            warehouse,
            run_id=run_id,
            options=self._options(),
            translator=self.translator(run_id),
            lifecycle=self.lifecycle(),
            batch=batch,
            budget_usd=self.cap(budget_usd),
            progress=progress,
            count_tokens=self._counter(),
        )
