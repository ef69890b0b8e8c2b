"""Re-rendering a call's request from today's ingredients, fast.

The request is rebuilt the way ``pipelines.rot.render`` builds it: the system
prompt from the template version, its recorded variables and the recorded doc
ids resolved in today's index; the model from the alias resolved today; the
params of the route (over the template version's defaults); the tools of the
template version. The messages and metadata are the user's side of the call
and come from the record.

Most calls of a day share a handful of (template, version, variables, doc set)
combinations, so system prompts are rendered once per combination and the
canonical JSON of every block is cached. The whole request's canonical JSON is
assembled from the canonical JSON of its top-level values, which gives the
same bytes as ``canonical.canonical_json`` (sorted keys, same separators).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from jinja2 import TemplateSyntaxError, UndefinedError

from pipelines.record.canonical import canonical_json, document_block, sha256_hex
from pipelines.rot.ingredients import TemplateVersion
from pipelines.rot.render import render_template

# The second clock and seed the impurity probe renders under: a different
# year, month, weekday, hour and minute than the first.
PROBE_SHIFT = timedelta(days=397, hours=7, minutes=13, seconds=11)
SEEDS = (0, 1)


@dataclass(frozen=True)
class SystemRender:
    """One template rendering: its canonical JSON and hash, or why it failed."""

    text: str | None
    canonical: str | None
    sha256: str | None
    impure: bool = False
    error: str | None = None


@dataclass(frozen=True)
class DocRef:
    """A retrieved document as the record has it."""

    doc_id: str
    text: str | None
    score: float | None


def canonical_object(pieces: Mapping[str, str]) -> str:
    """Canonical JSON of an object given the canonical JSON of each value."""
    return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + pieces[k] for k in sorted(pieces)) + "}"


def _safe_error(error: Exception) -> str:
    # Jinja's undefined and syntax messages name variables and lines, never values;
    # anything else may quote a value, so only its class is kept.
    if isinstance(error, (UndefinedError, TemplateSyntaxError)):
        line = f" (line {error.lineno})" if getattr(error, "lineno", None) else ""
        return f"{type(error).__name__}: {error.message}{line}"
    return type(error).__name__


class Renderer:
    """Renders and hashes blocks for one check run, at one clock, with caches."""

    def __init__(self, clock: datetime):
        self.clock = clock
        self._systems: dict[tuple, SystemRender] = {}
        self._canonical: dict[tuple, str] = {}
        self._documents: dict[tuple[str, str], str] = {}

    def system(
        self, template: TemplateVersion, variables_json: str | None, documents: Sequence[DocRef]
    ) -> SystemRender:
        """The template rendered with these variables and documents, under the run's
        clock; ``impure`` when a second clock and seed render it differently."""
        key = (template.sha256, variables_json, tuple(documents))
        found = self._systems.get(key)
        if found is None:
            found = self._systems[key] = self._render(template, variables_json, documents)
        return found

    def _render(self, template: TemplateVersion, variables_json: str | None, documents: Sequence[DocRef]):
        variables = json.loads(variables_json) if variables_json else {}
        docs = [{"doc_id": d.doc_id, "text": d.text, "score": d.score} for d in documents]
        try:
            text = render_template(template.source, variables, docs, clock=self.clock, seed=SEEDS[0])
            probe = render_template(template.source, variables, docs, clock=self.clock + PROBE_SHIFT, seed=SEEDS[1])
        except Exception as e:  # a template that does not render is a finding, not a crash
            return SystemRender(None, None, None, error=_safe_error(e))
        canonical = canonical_json(text)
        return SystemRender(text, canonical, sha256_hex(canonical), impure=probe != text)

    def canonical(self, kind: str, key: Any, value: Any) -> str:
        """Canonical JSON of a block that repeats across calls (tools, params), by a cache key."""
        found = self._canonical.get((kind, key))
        if found is None:
            found = self._canonical[(kind, key)] = canonical_json(value)
        return found

    def document_canonical(self, doc_id: str, text: str) -> str:
        """Canonical JSON of the ``document:<doc_id>`` block of a document text."""
        key = (doc_id, text)
        found = self._documents.get(key)
        if found is None:
            found = self._documents[key] = canonical_json(document_block(doc_id, text))
        return found
