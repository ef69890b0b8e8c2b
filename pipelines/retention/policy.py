"""The retention policy: a versioned YAML file, validated with pydantic.

``load_policy()`` reads the policy shipped with tracelake
(``default_policy.yaml`` next to this module); ``load_policy(path)`` reads
yours. A file that does not validate raises ``PolicyError`` naming the file,
the key and what was expected.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_POLICY = Path(__file__).with_name("default_policy.yaml")

# The stratification dimensions; a match may also name any other key of calls.segment.
DIMENSIONS = ("route", "user_tier", "language", "input_bucket")
UNKNOWN = "unknown"

Rate = Annotated[float, Field(ge=0.0, le=1.0)]
Match = dict[str, str | list[str]]


class PolicyError(ValueError):
    """A retention policy file that cannot be used; the message says where and what to fix."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tail(_Strict):
    percentile: float = Field(99.0, gt=0.0, lt=100.0)
    min_calls: int = Field(20, ge=1)


class SegmentRule(_Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    match: Match = Field(min_length=1)


class AlwaysKeep(_Strict):
    errors: bool = True
    # Not a switch: a thumbs-down is never swept, whatever a policy says.
    negative_feedback: Literal[True] = True
    eval_score_below: float | None = 3.0
    latency_ms_over: float | None = Field(10_000.0, gt=0)
    cost_usd_over: float | None = Field(0.50, gt=0)
    tail: Tail | None = Tail()
    segments: list[SegmentRule] = Field(default_factory=lambda: [SegmentRule(name="vip", match={"user_tier": "vip"})])
    escalated: bool = True
    guardrail_hit: bool = True
    flagged: bool = True
    # ingest's bookkeeping flags (how a record was stored), not findings about the call
    ignore_flags: list[str] = Field(default_factory=lambda: ["redacted", "request_reconstructed"])


class StratumRate(_Strict):
    match: Match = Field(min_length=1)
    rate: Rate


class Strata(_Strict):
    input_length_buckets: list[int] = Field(default_factory=lambda: [256, 1024, 4096, 16384, 65536])
    rates: list[StratumRate] = Field(default_factory=list)

    @field_validator("input_length_buckets")
    @classmethod
    def _increasing(cls, edges: list[int]) -> list[int]:
        if any(e <= 0 for e in edges) or edges != sorted(set(edges)):
            raise ValueError("expected positive token counts in increasing order, e.g. [256, 1024, 4096]")
        return edges

    def bucket_labels(self) -> list[str]:
        """Labels of the input-length buckets, shortest first (``unknown`` not included)."""
        edges = self.input_length_buckets
        if not edges:
            return ["all"]
        return (
            [f"<{_tokens(edges[0])}"]
            + [f"{_tokens(lo)}-{_tokens(hi)}" for lo, hi in zip(edges, edges[1:], strict=False)]
            + [f"{_tokens(edges[-1])}+"]
        )


class Coverage(_Strict):
    window_days: int = Field(7, ge=1, le=366)


class Sweep(_Strict):
    keep_span_attributes: list[str] = Field(default_factory=list)
    orphan_grace_hours: int = Field(1, ge=0)


class Policy(_Strict):
    version: int | str = Field(description="bump it whenever the rules change; stored with every decision")
    hot_window_days: int = Field(7, ge=0)
    base_rate: Rate = 0.10
    sampling_salt: str = ""
    always_keep: AlwaysKeep = AlwaysKeep()
    strata: Strata = Strata()
    coverage: Coverage = Coverage()
    sweep: Sweep = Sweep()

    @property
    def policy_version(self) -> str:
        return str(self.version)

    @property
    def sha256(self) -> str:
        """Hash of the effective rules: two files that decide the same way share it."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def _tokens(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _problem(error: dict[str, Any]) -> str:
    key = _where(error["loc"])
    if error["type"] == "extra_forbidden":
        return f"key '{key}' is not a retention policy setting (check the spelling against default_policy.yaml)"
    if error["type"] == "missing":
        return f"key '{key}' is required"
    if error["type"] == "literal_error" and error["loc"][-1] == "negative_feedback":
        return f"key '{key}': negative feedback is always kept; remove the key or set it to true"
    if error["type"] == "value_error":
        return f"key '{key}': {error['ctx']['error']}"
    return f"key '{key}': {error['msg']} (got {error.get('input')!r})"


def _unknown_buckets(policy: Policy) -> list[str]:
    """Matches that name an input bucket the policy does not have (one problem per key)."""
    labels = [*policy.strata.bucket_labels(), UNKNOWN]
    places = [(f"strata.rates.{i}.match", r.match) for i, r in enumerate(policy.strata.rates)]
    places += [(f"always_keep.segments.{i}.match", s.match) for i, s in enumerate(policy.always_keep.segments)]
    problems = []
    for where, match in places:
        wanted = match.get("input_bucket")
        for value in [wanted] if isinstance(wanted, str) else wanted or []:
            if value not in labels:
                problems.append(f"key '{where}.input_bucket': {value!r} is not a bucket; expected one of {labels}")
    return problems


def parse_policy(data: Any, source: str = "<policy>") -> Policy:
    """A policy from already-parsed YAML; ``source`` names it in errors."""
    if not isinstance(data, dict):
        raise PolicyError(
            f"retention policy {source}: expected a mapping of settings at the top level, got {type(data).__name__}"
        )
    try:
        policy = Policy.model_validate(data)
    except pydantic.ValidationError as e:
        problems = [_problem(err) for err in e.errors()]
    else:
        problems = _unknown_buckets(policy)
    if problems:
        raise PolicyError(f"retention policy {source}: {'; '.join(problems)}")
    return policy


def load_policy(path: str | Path | None = None) -> Policy:
    """The policy in ``path``, or the default policy shipped with tracelake."""
    file = Path(path) if path else DEFAULT_POLICY
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError(
            f"retention policy {file}: no such file; pass the path of a YAML policy, or none for the default"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PolicyError(f"retention policy {file}:{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    return parse_policy(data, str(file))
