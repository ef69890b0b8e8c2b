"""What callers hand the LLM resource and what they get back (CONTRACTS.md section 1)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from pipelines.record.canonical import request_sha256, sha256_hex

TERMINAL = ("succeeded", "errored", "expired", "canceled", "refused_budget")
# Errors the provider gives the same request every time (a bad request, a key
# without access): a stored one is final. Any other failure (still overloaded or
# rate-limited after the retries, timed out, expired, canceled) is sent again by
# the next run.
# the API's error types for those (a batch entry's ``error.type``)
PERMANENT_ERROR_TYPES = ("invalid_request_error", "authentication_error", "permission_error", "not_found_error")
PERMANENT_ERRORS = (
    *PERMANENT_ERROR_TYPES,
    "request_too_large",
    "BadRequestError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "UnprocessableEntityError",
)


def is_permanent(status: str, error: str | None) -> bool:
    """Whether a stored result is a success or an error the provider gives that request every time."""
    if status == "succeeded":
        return True
    return status == "errored" and any(kind in (error or "") for kind in PERMANENT_ERRORS)


@dataclass(frozen=True)
class LLMRequest:
    """One Messages request body plus what it is for.

    ``key`` is the content address: the same body, mode and sample index is
    never sent twice once a result is stored.
    """

    body: dict[str, Any]
    purpose: str
    mode: str
    sample_index: int = 0
    candidate: str | None = None
    call_id: str | None = None
    cache_prefix: bool = True
    # the retired model the call was recorded on, when ``body`` asks for its substitute
    # (pipelines.llm.lifecycle); recorded in the ledger, not part of the key
    substituted_from: str | None = None
    # a body decrypted for an exact replay (pipelines.replay.unlock): what comes back is sealed
    # with it (plaintexts back to tokens) before it is stored or returned; not part of the key
    seal: Callable[[Any], Any] | None = field(default=None, compare=False, repr=False)

    @cached_property
    def request_sha256(self) -> str:
        return request_sha256(self.body)

    @cached_property
    def key(self) -> str:
        return sha256_hex(f"{self.request_sha256}|{self.mode}|{self.sample_index}")

    @property
    def custom_id(self) -> str:
        """The Message Batches custom_id: the key itself (64 hex chars, the API's limit)."""
        return self.key

    @property
    def model(self) -> str | None:
        return self.body.get("model")

    def __hash__(self) -> int:
        return hash(self.key)


@dataclass(frozen=True)
class LLMResult:
    key: str
    request_sha256: str
    status: str
    response: dict[str, Any] | None
    error: str | None
    model: str | None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    cost_usd: float = 0.0
    batch_id: str | None = None
    attempts: int = 0
    simulated: bool = False
    reused: bool = False
    # parameters removed before sending (pipelines.llm.params.Translator)
    dropped: tuple[str, ...] = ()
    # how many runs have sent the request (it is sent again by later runs while it fails, up to a cap)
    runs: int = 1

    @property
    def text(self) -> str:
        """The concatenated text blocks of the response ('' when there is none)."""
        blocks = (self.response or {}).get("content") or []
        return "".join(b.get("text", "") for b in blocks if b.get("type") == "text")

    @property
    def stop_reason(self) -> str | None:
        return (self.response or {}).get("stop_reason")

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        blocks = (self.response or {}).get("content") or []
        return [b for b in blocks if b.get("type") == "tool_use"]


def sealed(request: LLMRequest, result: LLMResult) -> LLMResult:
    """``result`` with the request's seal applied to what the provider said (response, error)."""
    if request.seal is None:
        return result
    return replace(result, response=request.seal(result.response), error=request.seal(result.error))


@dataclass(frozen=True)
class Estimate:
    requests: int
    input_tokens: int
    max_output_tokens: int
    usd: float


class BudgetExceeded(Exception):
    """Sending would take the run over its cap: raised before anything of it is sent.

    The cap is per run, across every LLM stage of the run: ``spent_usd`` is what
    the run was billed for before (its ledger rows and open batches)."""

    def __init__(self, estimate: Estimate, budget_usd: float, spent_usd: float = 0.0) -> None:
        self.estimate = estimate
        self.budget_usd = budget_usd
        self.spent_usd = spent_usd
        before = f" on top of ${spent_usd:.4f} this run has already spent" if spent_usd else ""
        super().__init__(
            f"{estimate.requests} LLM requests would cost up to ${estimate.usd:.4f}{before} "
            f"({estimate.input_tokens} input tokens, up to {estimate.max_output_tokens} output tokens), "
            f"above the cap of ${budget_usd:.4f} for this run; nothing was sent for these requests. Raise the cap "
            f"(TRACELAKE_LLM_BUDGET_USD, or the caller's budget_usd / --budget-usd) or send fewer requests."
        )
