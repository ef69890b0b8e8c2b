"""The files of an ingredient store, parsed and validated.

Layout (a folder or an S3 prefix; see ``pipelines.demo.stores``)::

    templates/<template_id>/<version>.j2      Jinja2 source of one template version
    templates/<template_id>/<version>.yaml    optional: params and tools for that version
    documents/snapshots/<snapshot>.json       {doc_id: text} for one index snapshot
    documents/current.json                    {"snapshot": "<name>"}
    models.yaml                               alias -> dated snapshots with effective_from / effective_to
    params.yaml                               route -> current request params

Config files carry a ``version`` and are validated with pydantic. A bad file
raises ``StoreFileError`` naming the file, the key and what was expected, so
whoever edits the store can fix it without reading this code. Store files hold
configuration, never user data, so quoting their keys is safe.
"""

from __future__ import annotations

import json
from datetime import date
from typing import Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field

MODELS_FILE = "models.yaml"
PARAMS_FILE = "params.yaml"
CURRENT_FILE = "documents/current.json"


def template_key(template_id: str, version: str, suffix: str = ".j2") -> str:
    return f"templates/{template_id}/{version}{suffix}"


def snapshot_key(snapshot: str) -> str:
    return f"documents/snapshots/{snapshot}.json"


class StoreFileError(ValueError):
    """A store file that is missing, unreadable or not what the layout expects."""

    def __init__(self, file: str, problem: str):
        super().__init__(f"{file}: {problem}. Fix the file in the ingredient store and re-run the rot check.")
        self.file = file
        self.problem = problem


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AliasEntry(_Strict):
    """One dated snapshot an alias pointed at, from ``effective_from`` (inclusive)
    to ``effective_to`` (exclusive; open when absent)."""

    snapshot: str = Field(min_length=1)
    effective_from: date
    effective_to: date | None = None

    @pydantic.model_validator(mode="after")
    def _ordered(self) -> AliasEntry:
        if self.effective_to is not None and self.effective_to <= self.effective_from:
            raise ValueError("effective_to must be after effective_from")
        return self

    def covers(self, day: date) -> bool:
        return self.effective_from <= day and (self.effective_to is None or day < self.effective_to)


class ModelsConfig(_Strict):
    version: Literal[1]
    aliases: dict[str, list[AliasEntry]]

    @pydantic.model_validator(mode="after")
    def _no_overlap(self) -> ModelsConfig:
        for alias, entries in self.aliases.items():
            ordered = sorted(entries, key=lambda e: e.effective_from)
            for before, after in zip(ordered, ordered[1:], strict=False):
                if before.effective_to is None or before.effective_to > after.effective_from:
                    raise ValueError(
                        f"alias {alias!r}: the entry from {before.effective_from} overlaps the one from "
                        f"{after.effective_from}; close the earlier one with effective_to"
                    )
        return self

    def resolve(self, alias: str, day: date) -> str | None:
        """The snapshot ``alias`` points at on ``day``; None when it points nowhere."""
        for entry in self.aliases.get(alias, ()):
            if entry.covers(day):
                return entry.snapshot
        return None


class RouteParams(BaseModel):
    """Request params of one route; keys beyond the sampling ones (tool_choice,
    thinking, ...) are passed through as they are."""

    model_config = ConfigDict(extra="allow")
    max_tokens: int | None = Field(None, gt=0)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    stop_sequences: list[str] | None = None

    def as_request(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class ParamsConfig(_Strict):
    version: Literal[1]
    routes: dict[str, RouteParams]


class TemplateMetadata(_Strict):
    """Optional per-version metadata: params the version sends by default and its tools."""

    version: Literal[1] = 1
    params: RouteParams | None = None
    tools: list[dict[str, Any]] | None = None


class _Current(_Strict):
    snapshot: str = Field(min_length=1)


def _problem(error: pydantic.ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False)[:3]:
        key = ".".join(str(p) for p in item["loc"]) or "(top level)"
        parts.append(f"key {key}: {item['msg']}")
    return "; ".join(parts)


def _load_yaml(file: str, data: bytes) -> Any:
    try:
        return yaml.safe_load(data)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise StoreFileError(file, f"expected YAML, could not parse it{where}") from None


def _load_json(file: str, data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise StoreFileError(file, f"expected UTF-8 JSON ({type(e).__name__})") from None


def _validate(model: type[BaseModel], file: str, value: Any, expected: str) -> Any:
    if not isinstance(value, dict):
        raise StoreFileError(file, f"expected {expected}, got {type(value).__name__}")
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as e:
        raise StoreFileError(file, f"{_problem(e)} (expected {expected})") from None


def parse_models(data: bytes, file: str = MODELS_FILE) -> ModelsConfig:
    expected = "'version: 1' and 'aliases: {alias: [{snapshot, effective_from, effective_to}]}'"
    return _validate(ModelsConfig, file, _load_yaml(file, data), expected)


def parse_params(data: bytes, file: str = PARAMS_FILE) -> ParamsConfig:
    expected = "'version: 1' and 'routes: {route: {max_tokens, temperature, ...}}'"
    return _validate(ParamsConfig, file, _load_yaml(file, data), expected)


def parse_template_metadata(data: bytes, file: str) -> TemplateMetadata:
    expected = "a mapping with optional 'params' and 'tools' (a list of tool definitions)"
    return _validate(TemplateMetadata, file, _load_yaml(file, data), expected)


def parse_current(data: bytes, file: str = CURRENT_FILE) -> str:
    return _validate(_Current, file, _load_json(file, data), '{"snapshot": "<snapshot name>"}').snapshot


def parse_snapshot(data: bytes, file: str) -> dict[str, str]:
    value = _load_json(file, data)
    if not isinstance(value, dict):
        raise StoreFileError(file, f"expected a JSON object {{doc_id: text}}, got {type(value).__name__}")
    bad = [k for k, v in value.items() if not isinstance(v, str)]
    if bad:
        raise StoreFileError(file, f"key {bad[0]}: expected the document's text as a string")
    return value


def parse_template_source(data: bytes, file: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise StoreFileError(file, "expected a UTF-8 Jinja2 template") from None
