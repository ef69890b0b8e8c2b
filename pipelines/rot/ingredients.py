"""The ingredient stores as one rot-check run sees them, in memory.

The asset (or the CLI) reads the stores through their resources once per run
and hands this snapshot to the pure check, so every call of a run is judged
against the same state, and the row can say which state that was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property
from typing import Any

from jinja2 import meta, nodes

from pipelines.record.canonical import sha256_hex
from pipelines.rot.render import environment
from pipelines.rot.store_files import ModelsConfig, ParamsConfig, TemplateMetadata

# Names the renderer itself puts in a template's context (see render.py).
RENDERER_NAMES = frozenset({"documents", "now", "random"})
# Everything a sandboxed template can reach that is not a function of its inputs:
# the renderer's clock and generator, Jinja's lipsum() global and its random filter.
IMPURE_NAMES = frozenset({"now", "random", "lipsum"})
IMPURE_FILTERS = frozenset({"random"})


@dataclass(frozen=True)
class TemplateVersion:
    template_id: str
    version: str
    source: str
    metadata: TemplateMetadata = field(default_factory=TemplateMetadata)

    @cached_property
    def sha256(self) -> str:
        return sha256_hex(self.source)

    @cached_property
    def _ast(self) -> nodes.Template | None:
        try:
            return environment().parse(self.source)
        except Exception:
            return None  # rendering it fails too, and says why

    @cached_property
    def names(self) -> frozenset[str]:
        """Every name the template reads from its context."""
        return frozenset(meta.find_undeclared_variables(self._ast)) if self._ast is not None else frozenset()

    @cached_property
    def reaches_impurity(self) -> bool:
        """Can a rendering depend on anything but the template's inputs? Only through
        the clock, the generator, ``lipsum()`` or the ``random`` filter; a template that
        names none of them renders the same under any clock and seed."""
        if self._ast is None:
            return True
        return any(n.name in IMPURE_NAMES for n in self._ast.find_all(nodes.Name)) or any(
            f.name in IMPURE_FILTERS for f in self._ast.find_all(nodes.Filter)
        )

    @property
    def uses_documents(self) -> bool:
        return "documents" in self.names

    @property
    def variables(self) -> frozenset[str]:
        return self.names - RENDERER_NAMES

    @property
    def params(self) -> dict[str, Any]:
        return self.metadata.params.as_request() if self.metadata.params else {}

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return self.metadata.tools


@dataclass(frozen=True)
class Ingredients:
    """Templates (only the versions a run asked for), the current document index,
    the model alias map and the params per route."""

    templates: Mapping[tuple[str, str], TemplateVersion | None]
    index_snapshot: str | None
    documents: Mapping[str, str]
    models: ModelsConfig
    params: ParamsConfig
    models_sha256: str | None = None
    params_sha256: str | None = None

    def template(self, template_id: str, version: str) -> TemplateVersion | None:
        return self.templates.get((template_id, version))

    def resolve_model(self, alias: str, day: date) -> str | None:
        return self.models.resolve(alias, day)

    def route_params(self, route: str | None) -> dict[str, Any] | None:
        if route is None or route not in self.params.routes:
            return None
        return self.params.routes[route].as_request()
