"""Replay candidates: versioned, validated YAML entries in a registry.

A registry is a folder or an ``s3://`` prefix (``TRACELAKE_CANDIDATES``) of
``<slug>.yaml`` files::

    version: 1                       # the file format
    id: support-answer-v4            # the slug: the partition key of every replay
    revision: 1                      # bump when you change the candidate
    description: Answer in the customer's language, briefly.
    active: true                     # the nightly run replays active candidates
    applies_to: {services: [support.answer], template_id: support-answer}
    template: {id: support-answer, version: v4}     # a version in the template store, or
    template_source: "..."           # an inline Jinja2 template
    model: claude-sonnet-4-6-20261015
    params: {max_tokens: 400}
    tools: [...]                     # replaces the recorded tool definitions
    modes: [diff, state]             # capture, pinned, class_rate, diff, state
    sample: {per_stratum: 40, class_rate_samples: 5, step_limit: 6}

The registry itself is read by ``pipelines.resources.candidates.CandidateRegistry``.
The slug becomes a Dagster dynamic partition key, which Dagster does not
validate (``|``, ``,``, ``[``, ``]`` break multi-partition keys), so it is
checked here: lowercase letters, digits and single dashes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field

SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
SLUG_MAX = 63
MODES = ("capture", "pinned", "class_rate", "diff", "state")


class CandidateError(ValueError):
    """A candidate file that is not valid: names the file, the key and what was expected."""

    def __init__(self, file: str, problem: str):
        super().__init__(f"{file}: {problem}. Fix the candidate file in the registry; nothing was replayed for it.")
        self.file = file
        self.problem = problem


def slug_problem(slug: str) -> str | None:
    """Why ``slug`` cannot be a candidate id, or None when it can."""
    if not slug:
        return "the id is empty"
    if len(slug) > SLUG_MAX:
        return f"id {slug!r} is longer than {SLUG_MAX} characters"
    if not SLUG.match(slug):
        return (
            f"id {slug!r} is not a slug: use lowercase letters, digits and single dashes "
            "(no '|', ',', '[', ']', spaces or capitals; it becomes a Dagster partition key)"
        )
    return None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TemplateRef(_Strict):
    id: str = Field(min_length=1)
    version: str = Field(min_length=1)


class AppliesTo(_Strict):
    services: tuple[str, ...] = ()
    template_id: str | None = None


class Sampling(_Strict):
    per_stratum: int = Field(default=40, ge=1)
    class_rate_samples: int = Field(default=5, ge=1, le=100)
    step_limit: int = Field(default=6, ge=1, le=50)
    state_from_step: int = Field(default=0, ge=0)


class Candidate(_Strict):
    version: Literal[1] = 1
    id: str
    revision: int = Field(default=1, ge=1)
    description: str = Field(min_length=1)
    active: bool = True
    applies_to: AppliesTo = AppliesTo()
    template: TemplateRef | None = None
    template_source: str | None = None
    model: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    tools: tuple[dict[str, Any], ...] | None = None
    modes: tuple[Literal["capture", "pinned", "class_rate", "diff", "state"], ...] = ("diff", "state")
    # how a diff replay's old and new outputs are compared (pipelines/replay/judging.py)
    comparison: Literal["pairwise_judge", "signals"] = "pairwise_judge"
    sample: Sampling = Sampling()

    @pydantic.field_validator("id")
    @classmethod
    def _slug(cls, value: str) -> str:
        problem = slug_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @pydantic.model_validator(mode="after")
    def _one_template(self) -> Candidate:
        if self.template is not None and self.template_source is not None:
            raise ValueError("give either template (id + version) or template_source, not both")
        return self

    @property
    def changes_template(self) -> bool:
        return self.template is not None or self.template_source is not None

    @property
    def changes(self) -> list[str]:
        """What the candidate changes, by name (for reports)."""
        named = [("template", self.changes_template), ("model", self.model), ("params", self.params)]
        return [name for name, value in named if value] + (["tools"] if self.tools is not None else [])

    def applies(self, call: dict[str, Any]) -> bool:
        if self.applies_to.services and call.get("service") not in self.applies_to.services:
            return False
        return not (self.applies_to.template_id and call.get("template_id") != self.applies_to.template_id)


def parse_candidate(data: bytes | str, where: str) -> Candidate:
    """One candidate file, validated; CandidateError names the file and the key."""
    try:
        raw = yaml.safe_load(data)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        raise CandidateError(where, f"not valid YAML{line}") from None
    if not isinstance(raw, dict):
        raise CandidateError(where, "expected a mapping with version, id and description")
    try:
        candidate = Candidate.model_validate(raw)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        key = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise CandidateError(where, f"key {key}: {first['msg']}") from None
    stem = Path(where).name.removesuffix(".yaml").removesuffix(".yml")
    if stem != candidate.id:
        raise CandidateError(
            where, f"the file is named {stem!r} but its id is {candidate.id!r}; name it {candidate.id}.yaml"
        )
    return candidate
