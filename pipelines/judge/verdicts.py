"""Reading a judge's answer: the ``record_verdict`` tool call, validated; anything else is unreadable."""

from __future__ import annotations

from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from pipelines.judge.prompts import VERDICT_TOOL


class Verdict(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    error_class: str = Field(alias="class", min_length=1)
    confidence: float = Field(ge=0.0, le=1.0)
    evidence: str = ""
    affected_step: int | None = None


class Unreadable(ValueError):
    """A judge answer with no valid verdict; the message says what was wrong, never what it said."""


def parse_verdict(response: dict[str, Any] | None, allowed: list[str]) -> Verdict:
    if not response:
        raise Unreadable("no response body")
    blocks = [b for b in response.get("content") or [] if b.get("type") == "tool_use" and b.get("name") == VERDICT_TOOL]
    if not blocks:
        raise Unreadable(f"no {VERDICT_TOOL} tool call (stop_reason {response.get('stop_reason')})")
    try:
        verdict = Verdict.model_validate(blocks[0].get("input") or {})
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        raise Unreadable(f"{VERDICT_TOOL} input: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    if verdict.error_class not in allowed:
        raise Unreadable(f"{VERDICT_TOOL} class {verdict.error_class!r} is not one of {allowed}")
    return verdict
