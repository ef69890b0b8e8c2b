"""Re-rendering a call's request from today's ingredients, fast.

The request is rebuilt the way ``pipelines.rot.render`` builds it: the system
prompt from the template version, its recorded variables and the recorded doc
ids resolved in today's index; the model from the alias resolved today; the
params of the route (over the template version's defaults); the tools of the
template version. The messages and metadata are the user's side of the call
and come from the record.

Most calls of a day share a handful of (template, version, variables, doc set)
combinations, so system prompts are rendered once per combination and the
canonical JSON of every block is cached. Retrieval scores differ on every call;
they are part of the cache key only when the template read them (documents
are handed to it as dicts that note which fields were read: a rendering that
never read a score renders the same with any score). The whole request's canonical JSON is
assembled from the canonical JSON of its top-level values, which gives the
same bytes as ``canonical.canonical_json`` (sorted keys, same separators).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from json.encoder import encode_basestring
from typing import Any, NamedTuple

from jinja2 import TemplateSyntaxError, UndefinedError

from pipelines.record.canonical import canonical_json, document_block, sha256_hex
from pipelines.rot.ingredients import Ingredients, TemplateVersion
from pipelines.rot.printed_scores import PrintedScores
from pipelines.rot.render import render_template
from pipelines.rot.template_inputs import SEEDS, DocRef, ObservedDocument

# The second clock and seed the impurity probe renders under: a different
# year, month, weekday, hour and minute than the first.
PROBE_SHIFT = timedelta(days=397, hours=7, minutes=13, seconds=11)


class SystemRender(NamedTuple):
    """One template rendering: its canonical JSON and hash, or why it failed (a tuple:
    a run makes one per distinct rendering, and a frozen dataclass costs more to make)."""

    canonical: str | None
    sha256: str | None
    impure: bool = False
    error: str | None = None

    @property
    def text(self) -> str | None:
        """The rendered text (read for diffs only: a rendering from pieces makes its
        canonical JSON directly, and the JSON string reads back as the text exactly)."""
        return json.loads(self.canonical) if self.canonical is not None else None


_KEYS: dict[str, str] = {}
_UNSET = object()


def _key(name: str) -> str:
    found = _KEYS.get(name)
    if found is None:
        found = _KEYS[name] = json.dumps(name, ensure_ascii=False)
    return found


def canonical_object(pieces: Mapping[str, str]) -> str:
    """Canonical JSON of an object given the canonical JSON of each value."""
    return "{" + ",".join(_key(k) + ":" + pieces[k] for k in sorted(pieces)) + "}"


def _canonical_text(text: str) -> str:
    """``canonical_json`` of a rendered text: a JSON string is what the spec's serializer
    (``json.dumps(..., ensure_ascii=False)``) makes of it, which is this function of the
    json module (canonical_json's guards are for nulls and numbers; a string has neither)."""
    return encode_basestring(text)


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
        self._slotted: dict[str, Any] = {}
        self._models: dict[tuple[str, date], tuple[str | None, str | None]] = {}
        self._params: dict[tuple, tuple[dict[str, Any], dict[str, str], bool]] = {}

    def system(
        self, template: TemplateVersion, variables_json: str | None, documents: Sequence[DocRef]
    ) -> SystemRender:
        """The template rendered with these variables and documents, under the run's
        clock; ``impure`` when a second clock and seed render it differently."""
        base = (template.sha256, variables_json, tuple([(d.doc_id, d.text) for d in documents]))
        found = self._systems.get(base)
        if found is not None:
            return found
        scored = (base, tuple([d.score for d in documents]))
        found = self._systems.get(scored)
        if found is None:
            found, read_scores = self._render(template, variables_json, documents)
            self._systems[scored if read_scores else base] = found
        return found

    def reads_scores(self, template: TemplateVersion, variables_json: str | None, documents: Sequence[DocRef]) -> bool:
        """Does rendering these inputs read a retrieval score (so calls differing only
        in scores render differently)? A rendering that fails counts as reading them."""
        self.system(template, variables_json, documents)
        return (template.sha256, variables_json, tuple((d.doc_id, d.text) for d in documents)) not in self._systems

    def _render(
        self, template: TemplateVersion, variables_json: str | None, documents: Sequence[DocRef]
    ) -> tuple[SystemRender, bool]:
        """(the rendering, whether the template read a retrieval score)."""
        counted = self._counted(template, variables_json, documents)
        if counted is not None:
            canonical, read_scores = counted
            return SystemRender(canonical, sha256_hex(canonical)), read_scores
        variables = json.loads(variables_json) if variables_json else {}
        seen: set[str] = set()
        docs = [ObservedDocument({"doc_id": d.doc_id, "text": d.text, "score": d.score}, seen) for d in documents]
        # json (tojson) reads dicts natively, past the observation: then assume it read everything
        read_scores = "tojson" in template.source
        try:
            text = render_template(template.source, variables, docs, clock=self.clock, seed=SEEDS[0])
            # the impurity probe; a template that reaches no clock or randomness renders the same
            probe = (
                render_template(template.source, variables, docs, clock=self.clock + PROBE_SHIFT, seed=SEEDS[1])
                if template.reaches_impurity
                else text
            )
        except Exception as e:  # a template that does not render is a finding, not a crash
            return SystemRender(None, None, error=_safe_error(e)), True
        read_scores = read_scores or "score" in seen or "*" in seen
        canonical = _canonical_text(text)
        return SystemRender(canonical, sha256_hex(canonical), impure=probe != text), read_scores

    def _counted(
        self, template: TemplateVersion, variables_json: str | None, documents: Sequence[DocRef]
    ) -> tuple[str, bool] | None:
        """(the rendering's canonical JSON, whether it read a score) from cached pieces,
        where the template's document loops can be cut into a skeleton and per-document
        slots (``PrintedScores.render_counted``): calls that differ only in their
        documents render the rest of the template once."""
        slotted = self._slotted.get(template.sha256, _UNSET)
        if slotted is _UNSET:
            slotted = self._slotted[template.sha256] = PrintedScores.of(template, document_fields=True)
        return slotted.render_counted(variables_json, documents, self.clock) if slotted is not None else None

    def model(self, alias: str, resolve: Callable[[], str | None], day: date) -> tuple[str | None, str | None]:
        """(the snapshot an alias resolves to on ``day``, its JSON), once per alias."""
        found = self._models.get((alias, day))
        if found is None:
            model = resolve()
            found = self._models[(alias, day)] = (
                model,
                json.dumps(model, ensure_ascii=False) if model is not None else None,
            )
        return found

    def params(
        self, route_key: tuple, template: TemplateVersion | None, ingredients: Ingredients
    ) -> tuple[dict[str, Any], dict[str, str], bool]:
        """(today's params of a route and template version, their canonical JSON, whether
        the route is configured), once per route and version; callers only read them."""
        found = self._params.get(route_key)
        if found is None:
            route = ingredients.route_params(route_key[0])
            merged = {**(template.params if template else {}), **(route or {})}
            params = {k: v for k, v in merged.items() if v is not None}
            pieces = {k: canonical_json(v) for k, v in params.items()}
            found = self._params[route_key] = (params, pieces, route is not None)
        return found

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


@dataclass
class Rerendered:
    """Today's request for a call, as the canonical JSON of its top-level values."""

    model: str | None
    params: dict[str, Any]
    route_known: bool
    current: list[DocRef]
    system: SystemRender | None
    pieces: dict[str, str]
    param_pieces: dict[str, str]

    @property
    def complete(self) -> bool:
        return self.system is not None and self.system.canonical is not None and self.model is not None


def rerender_request(
    call: Mapping[str, Any],
    request: Mapping[str, Any],
    template: TemplateVersion | None,
    docs: Sequence[Mapping[str, Any]],
    ingredients: Ingredients,
    renderer: Renderer,
    today: date,
) -> Rerendered:
    """The request a call's names resolve to today (see the module docstring)."""
    # model: the alias resolved today; a call without an alias named a model directly
    alias = call.get("model_alias")
    if alias:
        model, model_json = renderer.model(alias, lambda: ingredients.resolve_model(alias, today), today)
    else:
        model = request.get("model")
        model_json = json.dumps(model, ensure_ascii=False) if model is not None else None
    # params: the template version's defaults, overridden by the route's config
    # the version's metadata (its default params) is not in the source hash: key by the version too
    route_key = (call.get("service"), (template.template_id, template.version, template.sha256) if template else None)
    params, param_pieces, route_known = renderer.params(route_key, template, ingredients)
    documents = ingredients.documents
    current = [DocRef(d["doc_id"], documents.get(d["doc_id"]), d.get("score")) for d in docs]
    present = tuple(d for d in current if d.text is not None)
    system = renderer.system(template, call.get("template_variables_json"), present) if template else None

    pieces: dict[str, str] = {}
    if model_json is not None:
        pieces["model"] = model_json
    if system is not None and system.canonical is not None:
        pieces["system"] = system.canonical
    # from the record, whose JSON is canonical already (no None in objects): dumps suffices
    pieces["messages"] = json.dumps(
        request.get("messages") or [], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    if template is not None and template.tools:
        pieces["tools"] = renderer.canonical("tools", template.sha256, template.tools)
    pieces.update(param_pieces)
    if request.get("metadata"):
        pieces["metadata"] = canonical_json(request["metadata"])
    return Rerendered(model, params, route_known, current, system, pieces, param_pieces)
