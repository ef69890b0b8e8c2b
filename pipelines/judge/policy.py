"""The judge policy: a versioned YAML file, validated with pydantic.

``load_policy()`` reads the policy shipped with tracelake (``default_policy.yaml``
next to this module); ``load_policy(path)`` reads yours. A file that does not
validate raises ``PolicyError`` naming the file, the key and what was expected.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field

DEFAULT_POLICY = Path(__file__).with_name("default_policy.yaml")


class PolicyError(ValueError):
    """A judge policy file that cannot be used; the message says where and what to fix."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Always(_Strict):
    heuristic_finding: bool = True
    negative_feedback: bool = True
    error: bool = True
    escalated: bool = True


class Window(_Strict):
    start: datetime
    end: datetime
    reason: str = ""


class Incident(_Strict):
    enabled: bool = False
    windows: list[Window] = Field(default_factory=list)


class Sampling(_Strict):
    base_rate: float = Field(0.05, ge=0.0, le=1.0)
    always: Always = Always()
    incident: Incident = Incident()


class Thresholds(_Strict):
    session_cost_usd: float = Field(0.50, gt=0)
    route_outlier_iqr_factor: float = Field(3.0, gt=0)
    route_outlier_median_factor: float = Field(3.0, gt=0)
    route_outlier_min_sessions: int = Field(20, ge=3)
    context_fraction: float = Field(0.9, gt=0, le=1)
    loop_max_step: int = Field(8, ge=1)
    loop_repeats: int = Field(3, ge=2)
    deep_sessions: int = Field(5, ge=0)
    deep_step: int = Field(7, ge=0)


class JudgeSettings(_Strict):
    model: str = "claude-haiku-4-5-20251001"
    max_tokens: int = Field(400, ge=64)
    budget_usd: float = Field(5.0, ge=0)
    classes: list[str] = Field(default_factory=lambda: ["hallucination_detected", "tool_misuse"])
    self_agreement_share: float = Field(0.2, ge=0, le=1)


class Policy(_Strict):
    version: str = Field(min_length=1)
    sampling: Sampling = Sampling()
    thresholds: Thresholds = Thresholds()
    class_rate_thresholds: dict[str, float] = Field(default_factory=dict)
    refusal_topics: list[str] = Field(default_factory=list)
    judge: JudgeSettings = JudgeSettings()
    sha256: str = ""

    def incident_on(self, at: datetime) -> bool:
        """True when the incident switch is on, or ``at`` falls in one of its windows."""
        incident = self.sampling.incident
        return incident.enabled or any(w.start <= at < w.end for w in incident.windows)


def load_policy(path: str | Path | None = None) -> Policy:
    where = Path(path) if path else DEFAULT_POLICY
    try:
        text = where.read_text(encoding="utf-8")
    except OSError as e:
        raise PolicyError(f"judge policy {where}: cannot read it ({e.strerror}); set TRACELAKE_JUDGE_POLICY") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise PolicyError(f"judge policy {where}: not YAML ({e})") from None
    if not isinstance(data, dict):
        raise PolicyError(f"judge policy {where}: expected a mapping at the top, got {type(data).__name__}")
    try:
        policy = Policy.model_validate(data)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise PolicyError(f"judge policy {where}: key {key!r}: {first['msg']}") from None
    return policy.model_copy(update={"sha256": hashlib.sha256(text.encode()).hexdigest()})
