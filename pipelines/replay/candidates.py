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
    budget_usd: 5.0                  # replay_summary warns when the window costs more

The registry itself is read by ``pipelines.resources.candidates.CandidateRegistry``.
The slug becomes a Dagster dynamic partition key, which Dagster does not
validate (``|``, ``,``, ``[``, ``]`` break multi-partition keys), so it is
checked here: lowercase letters, digits and single dashes.

A candidate file is data from whoever can write to the registry, and everything in
it ends up in requests, tables, logs and terminals, so its limits are part of the
schema: the file's size (``MAX_FILE_BYTES``), YAML without anchors or aliases (a
kilobyte of aliases can expand to gigabytes once serialized), a model id of the
characters provider ids use, a template of at most ``MAX_TEMPLATE_CHARS``, params
and tools of bounded size and depth that cannot replace the request's content, and
no control or bidirectional-override characters in any text. A file over a limit
is rejected alone, with the key and the limit; the other candidates still run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from pipelines.printable import unsafe

SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
SLUG_MAX = 63
MODES = ("capture", "pinned", "class_rate", "diff", "state")
# What a candidate file may hold (README "Replay", candidates)
MAX_FILE_BYTES = 256 * 1024
MAX_TEMPLATE_CHARS = 100_000  # ~30k tokens of system prompt, in every replayed request
MAX_NAME_CHARS = 200  # a model id, a service, a template id or version
MAX_DESCRIPTION_CHARS = 2_000
MAX_PARAMS_BYTES = 16 * 1024  # as JSON
MAX_TOOLS_BYTES = 128 * 1024  # as JSON
MAX_NESTING = 16  # levels of dicts and lists inside params or a tool
# a model id as providers spell them: claude-sonnet-4-6-20261015, anthropic.claude-...-v1:0, ...@20241022, ARNs
MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]*$")
PARAM_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
# the request's content and identity: a candidate changes them through model, template and tools, never params
NOT_PARAMS = frozenset({"model", "messages", "system", "tools", "stream"})


def example_yaml(slug: str) -> str:
    """A minimal candidate file (``tracelake candidates new`` writes it; the UI shows it)."""
    return f"""version: 1
id: {slug}             # the file is {slug}.yaml
revision: 1
description: What this candidate changes, in one sentence.
applies_to: {{services: [support.answer]}}
model: claude-sonnet-4-6-20261015   # or template_source, params, tools
modes: [diff]          # capture, pinned, class_rate, diff, state
sample: {{per_stratum: 40}}
budget_usd: 5.0        # replay_summary warns above it
"""


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


def _printable(value: str) -> str:
    found = unsafe(value)
    if found is not None:
        raise ValueError(f"contains a control or bidirectional-override character ({found}); write plain text")
    return value


def _strings(value: Any):
    """Every string in a JSON-like value (keys and values)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)


def _nesting(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list, tuple)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _bounded_json(value: Any, what: str, max_bytes: int) -> Any:
    """``value`` when it is JSON of at most ``max_bytes`` and ``MAX_NESTING`` levels with printable strings."""
    if _nesting(value) > MAX_NESTING:
        raise ValueError(f"{what} nest deeper than {MAX_NESTING} levels")
    size = len(json.dumps(value, ensure_ascii=False, default=str).encode())
    if size > max_bytes:
        raise ValueError(f"{what} are {size} bytes as JSON; at most {max_bytes}")
    for text in _strings(value):
        _printable(text)
    return value


def template_problem(text: str) -> str | None:
    """Why ``text`` is too big to be a candidate's template (inline or from the template store), or None."""
    if len(text) > MAX_TEMPLATE_CHARS:
        return f"the template is {len(text):,} characters; at most {MAX_TEMPLATE_CHARS:,} (every request carries it)"
    return None


def _template(text: str) -> str:
    problem = template_problem(text)
    if problem:
        raise ValueError(problem)
    return _printable(text)


def _model(name: str) -> str:
    if not MODEL.match(name):
        raise ValueError(
            f"{name[:80]!r} is not a model id: use letters, digits and . _ : @ / + - as the provider spells it"
        )
    return name


def _params(params: dict[str, Any]) -> dict[str, Any]:
    for key in params:
        if key in NOT_PARAMS:
            raise ValueError(f"{key} cannot be a param: set it with the candidate's model, template or tools")
        if not PARAM_NAME.match(key):
            raise ValueError(f"{key[:80]!r} is not a request parameter name (lowercase letters, digits, _)")
    return _bounded_json(params, "params", MAX_PARAMS_BYTES)


Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(_printable)]
ModelId = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(_model)]
Text = Annotated[str, Field(min_length=1, max_length=MAX_DESCRIPTION_CHARS), AfterValidator(_printable)]
Template = Annotated[str, AfterValidator(_template)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TemplateRef(_Strict):
    id: Name
    version: Name


class AppliesTo(_Strict):
    services: tuple[Name, ...] = Field(default=(), max_length=100)
    template_id: Name | None = None


class Sampling(_Strict):
    per_stratum: int = Field(default=40, ge=1)
    class_rate_samples: int = Field(default=5, ge=1, le=100)
    step_limit: int = Field(default=6, ge=1, le=50)
    state_from_step: int = Field(default=0, ge=0)


class Candidate(_Strict):
    version: Literal[1] = 1
    id: str
    revision: int = Field(default=1, ge=1)
    description: Text
    active: bool = True
    applies_to: AppliesTo = AppliesTo()
    template: TemplateRef | None = None
    template_source: Template | None = None
    model: ModelId | None = None
    params: Annotated[dict[str, Any], AfterValidator(_params)] = Field(default_factory=dict)
    tools: tuple[dict[str, Any], ...] | None = Field(default=None, max_length=128)
    modes: tuple[Literal["capture", "pinned", "class_rate", "diff", "state"], ...] = ("diff", "state")
    # how a diff replay's old and new outputs are compared (pipelines/replay/judging.py)
    comparison: Literal["pairwise_judge", "signals"] = "pairwise_judge"
    sample: Sampling = Sampling()
    # what its replays and their judge may cost over the window replayed (a warn check on replay_summary)
    budget_usd: float | None = Field(default=None, gt=0)

    @pydantic.field_validator("id")
    @classmethod
    def _slug(cls, value: str) -> str:
        problem = slug_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @pydantic.field_validator("tools")
    @classmethod
    def _tools(cls, value: tuple[dict[str, Any], ...] | None) -> tuple[dict[str, Any], ...] | None:
        return None if value is None else _bounded_json(value, "tools", MAX_TOOLS_BYTES)

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


class _NoAliases(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, refusing anchors (``&a``) and aliases (``*a``): a candidate
    never needs them, and a billion-laughs bomb is made of them (1.2 KB of aliases in
    ``params`` expands to gigabytes once anything serializes it)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases (& and *) are not allowed in a candidate file", event.start_mark
            )
        return super().compose_node(parent, index)


def _load_yaml(data: bytes | str, where: str) -> Any:
    size = len(data.encode() if isinstance(data, str) else data)
    if size > MAX_FILE_BYTES:
        raise CandidateError(where, f"the file is {size:,} bytes; a candidate file may be at most {MAX_FILE_BYTES:,}")
    try:
        return yaml.load(data, Loader=_NoAliases)  # noqa: S506 (a SafeLoader that also refuses aliases)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None)
        raise CandidateError(where, f"not valid YAML{line}" + (f": {problem}" if problem else "")) from None
    except RecursionError:
        raise CandidateError(where, "the YAML nests too deeply to read") from None


def parse_candidate(data: bytes | str, where: str) -> Candidate:
    """One candidate file, validated; CandidateError names the file and the key.
    Whatever the file holds, nothing else is raised: one bad file never stops the others."""
    raw = _load_yaml(data, where)
    if not isinstance(raw, dict):
        raise CandidateError(where, "expected a mapping with version, id and description")
    try:
        candidate = Candidate.model_validate(raw)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        key = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise CandidateError(where, f"key {key}: {first['msg']}") from None
    except RecursionError:
        raise CandidateError(where, f"a value nests deeper than {MAX_NESTING} levels") from None
    stem = Path(where).name.removesuffix(".yaml").removesuffix(".yml")
    if stem != candidate.id:
        raise CandidateError(
            where, f"the file is named {stem!r} but its id is {candidate.id!r}; name it {candidate.id}.yaml"
        )
    return candidate
