"""Which models the API still serves, and what a retired one is replayed on.

Two sources, read once per process:

- the pinned anthropic SDK: the model ids it knows (``anthropic.types.Model``) and
  its own end-of-life dates (``anthropic/_data/deprecated_models.py``);
- ``lifecycle.yaml`` beside this module, layered with a deployment's own file
  (``TRACELAKE_MODEL_LIFECYCLE``): rows of ``model``, ``retired_on``, ``substitute``.
  A row adds a model the SDK no longer lists, corrects a date, or names the
  substitute; a deployment's row wins over a shipped one.

A model is ``retired`` from its retirement date on, ``retiring`` before it,
``active`` when known and not retiring, ``unknown`` when neither the SDK, the
lifecycle files nor the price table know its family.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import cache
from pathlib import Path
from typing import Any

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field

from pipelines.llm.pricing import family, table

SHIPPED = Path(__file__).with_name("lifecycle.yaml")
ACTIVE, RETIRING, RETIRED, UNKNOWN = "active", "retiring", "retired", "unknown"
_ORDINAL = re.compile(r"(\d+)(st|nd|rd|th)\b")


class LifecycleError(ValueError):
    """A lifecycle file that is not valid: names the file, the row and the key."""


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@/-]+$")
    retired_on: date | None = None
    substitute: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@/-]+$")


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    version: typing.Literal[1] = 1
    models: list[_Row] = Field(default_factory=list)


@dataclass(frozen=True)
class ModelStatus:
    model: str
    state: str  # active | retiring | retired | unknown
    retired_on: date | None = None
    substitute: str | None = None
    source: str | None = None  # where the retirement date came from

    @property
    def needs_substitute(self) -> bool:
        return self.state == RETIRED


def sdk_date(text: str) -> date:
    """``"November 30th, 2026"`` (the SDK's format) -> date(2026, 11, 30)."""
    return datetime.strptime(_ORDINAL.sub(r"\1", text).replace(",", ""), "%B %d %Y").date()


@cache
def sdk_lifecycle() -> tuple[str, frozenset[str], dict[str, date]]:
    """(SDK version, the model ids it knows, its end-of-life dates)."""
    import anthropic
    from anthropic._data import DEPRECATED_MODELS
    from anthropic.types import Model

    known = {value for arg in typing.get_args(Model) for value in typing.get_args(arg) if isinstance(value, str)}
    return anthropic.__version__, frozenset(known), {m: sdk_date(d) for m, d in DEPRECATED_MODELS.items()}


def read_file(path: str | Path) -> dict[str, _Row]:
    """One lifecycle YAML, validated; ``LifecycleError`` names the file, the row and the key."""
    where = str(path)
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise LifecycleError(
            f"{where}: cannot be read ({e.strerror}); set TRACELAKE_MODEL_LIFECYCLE to a YAML file"
        ) from None
    except yaml.YAMLError:
        raise LifecycleError(f"{where}: not valid YAML") from None
    try:
        parsed = _File.model_validate(raw or {})
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        key = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise LifecycleError(f"{where}: key {key}: {first['msg']}") from None
    return {row.model: row for row in parsed.models}


@dataclass(frozen=True)
class Lifecycle:
    rows: dict[str, _Row]
    sources: dict[str, str]  # model -> the file its row came from
    sdk_version: str
    sdk_models: frozenset[str]
    sdk_retirements: dict[str, date]

    def status(self, model: str, today: date | None = None) -> ModelStatus:
        today = today or datetime.now(UTC).date()
        row = self.rows.get(model)
        retired_on, source = None, None
        if model in self.sdk_retirements:
            retired_on, source = self.sdk_retirements[model], f"anthropic SDK {self.sdk_version}"
        if row is not None and row.retired_on is not None:
            retired_on, source = row.retired_on, self.sources[model]
        substitute = row.substitute if row is not None else None
        if retired_on is not None:
            state = RETIRED if today >= retired_on else RETIRING
            return ModelStatus(model, state, retired_on, substitute, source)
        known = {family(m) for m in self.sdk_models} | set(table()[1]) | {family(m) for m in self.rows}
        return ModelStatus(model, ACTIVE if family(model) in known else UNKNOWN, None, substitute, None)

    def replacement(self, model: str, today: date | None = None) -> str | None:
        """What a request on ``model`` is sent on today: None while the model is served; the
        substitute (followed while it is itself retired) once it is retired. Raises
        ``UnmappedModel`` for a retired model without a served substitute."""
        seen = [model]
        current = self.status(model, today)
        while current.state == RETIRED:
            if current.substitute is None:
                raise UnmappedModel(model, current, seen)
            if current.substitute in seen:
                raise LifecycleError(f"substitutes of {model} go round in a circle: {' -> '.join(seen)}")
            seen.append(current.substitute)
            current = self.status(current.substitute, today)
        return seen[-1] if len(seen) > 1 else None


def serve(
    lifecycle: Lifecycle | None, body: Mapping[str, Any], today: date | None = None
) -> tuple[dict[str, Any], str | None]:
    """``body`` on the model the API serves today: (the body, the retired model it asked for or None).

    The one place a request recorded on a retired model is moved to its substitute
    (replay and debugging alike); raises ``UnmappedModel`` when there is none."""
    model = str(body.get("model") or "")
    substitute = lifecycle.replacement(model, today) if lifecycle is not None and model else None
    if substitute is None:
        return dict(body), None
    return {**body, "model": substitute}, model


class UnmappedModel(LookupError):
    """A retired model with no substitute: requests on it would all come back not_found_error."""

    def __init__(self, model: str, status: ModelStatus, chain: list[str]) -> None:
        self.model = model
        self.status = status
        via = f" (via {' -> '.join(chain)})" if len(chain) > 1 else ""
        super().__init__(
            f"model {chain[-1]}{via} was retired on {status.retired_on} ({status.source}) and has no substitute: "
            f"every request on it would come back not_found_error. Add a row "
            f"'- {{model: {chain[-1]}, substitute: <a served model>}}' to the lifecycle file named by "
            f"TRACELAKE_MODEL_LIFECYCLE (or to pipelines/llm/lifecycle.yaml); nothing was sent."
        )


def load(path: str | None = None) -> Lifecycle:
    """The shipped lifecycle with ``path`` (a deployment's file) layered on top."""
    version, models, retirements = sdk_lifecycle()
    rows = read_file(SHIPPED)
    sources = dict.fromkeys(rows, SHIPPED.name)
    if path:
        own = read_file(path)
        rows.update(own)
        sources.update(dict.fromkeys(own, str(path)))
    return Lifecycle(rows, sources, version, models, retirements)
