"""The verdict of one class of an ingredient set, for the grouped check: the steps of
``Checker.judge`` and its block comparison on an unredacted call whose stored bytes the
recorded hash witnessed, taken on the class's values without building a call row or a
``RotCheck``, with what repeats across classes worked out once per run.

Across a day's classes the model, params and tools blocks take a handful of values (an
alias's snapshot, a route's params, a template's tools): their canonical JSON and
whether a recorded hash matches it are computed once per distinct pair. What is left
per class is its system prompt (rendered by the run's ``Renderer``, once per template,
variables and documents) and, where it moved, the documents and the template judged
as ``Checker`` judges them (its own methods). A class this does not cover (no template
version in the store, a template that does not render or reads the clock, a model that
does not resolve, a call without an alias or block hashes, a keyed block hash) returns
None, and ``Checker.judge`` decides it, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

from pipelines.record.canonical import canonical_json
from pipelines.rot.check import COMPONENTS, FULL_REQUEST, ROTTED, VERIFIED, Checker, _params_of
from pipelines.rot.rerender import _key, canonical_object
from pipelines.rot.template_inputs import DocRef

OWN_KEYS = ("messages", "metadata")
_UNSET = object()
_PLAIN = (None, "sha256")
_TOP_LEVEL = {"model", "params", "tools"}  # moved blocks that are top-level values other than the system's


def between(key: str) -> bool:
    """A key that sorts between the call's own keys (never in practice)."""
    return "messages" < key < "metadata"


def around(pieces: Mapping[str, str]) -> tuple[str, str]:
    """A canonical request's bytes before and after its own part (its messages and
    metadata), given the canonical JSON of its other top-level values."""
    keys = sorted(pieces)
    before = [_key(k) + ":" + pieces[k] for k in keys if k < "messages"]
    after = [_key(k) + ":" + pieces[k] for k in keys if k > "metadata"]
    head = "{" + "".join(p + "," for p in before) + '"messages":'
    return head, "".join("," + p for p in after) + "}"


def reproduces(
    text: str,
    request: Mapping[str, Any],
    keys: set[str],
    pieces: Mapping[str, str],
    bounds: tuple[str, str] | None = None,
) -> bool:
    """Do the stored canonical bytes ``text`` (with top-level ``keys`` besides the call's
    own part) hold today's pieces other than the own part? A JSON value ends where its
    bytes say, so a text that starts with today's bytes up to ``"messages":`` has their
    values; one that ends with today's bytes after the own part has those, read from the
    end (the first ``,"key":`` of them cannot sit inside a string or a nested value of a
    valid text); the same keys on both sides leave nothing else. A key that sorts between
    messages and metadata (never in practice) has its value serialised and compared.
    ``pieces`` are today's, without the own part's; ``bounds`` their ``around``, if known."""
    if pieces.keys() != keys:
        return False
    if any(between(k) for k in keys):
        return pieces == {k: canonical_json(request[k]) for k in keys}
    head, tail = bounds if bounds is not None else around(pieces)
    return len(text) >= len(head) + len(tail) and text.startswith(head) and text.endswith(tail)


class ClassJudge:
    """Judges classes for one check run (one checker, its caches)."""

    def __init__(self, checker: Checker):
        self.checker = checker
        self.ingredients = checker.ingredients
        self.renderer = checker.renderer
        self.matches = checker.redaction.matches
        self._templates: dict[tuple[str, str], tuple[Any, bool, frozenset[str], str | None]] = {}
        self._differs: dict[tuple, bool] = {}
        self._models: dict[str, tuple[str | None, str | None]] = {}
        self._layouts: dict[tuple, tuple[str, str, str] | None] = {}
        self._params_json: dict[tuple, str] = {}

    def _template(self, template_id: str, version: str) -> tuple[Any, bool, frozenset[str], str | None]:
        key = (template_id, version)
        found = self._templates.get(key)
        if found is None:
            template = self.ingredients.template(template_id, version)
            if template is None:
                found = (None, False, frozenset(), None)
            else:
                tools = self.renderer.canonical("tools", template.sha256, template.tools) if template.tools else None
                found = (template, template.uses_documents, template.variables, tools)
            self._templates[key] = found
        return found

    def _bounds(self, layout_key: tuple, pieces: Mapping[str, str], system: str) -> tuple[str, str] | None:
        """``around(pieces)`` (None where a key sorts between the own keys). Only the
        system prompt differs between the classes of one model, route and template
        version: their bytes around it are joined once per run (``\\x00`` cannot occur in
        canonical JSON, which escapes control characters, so it marks the hole)."""
        layout = self._layouts.get(layout_key, _UNSET)
        if layout is _UNSET:
            layout = None
            if not any(between(k) for k in pieces):
                head, tail = around({**pieces, "system": "\x00"})
                before, after = tail.split("\x00")
                layout = (head, before, after)
            self._layouts[layout_key] = layout
        return None if layout is None else (layout[0], layout[1] + system + layout[2])

    def _moved(self, want: tuple[str, str | None] | None, canonical: str | None) -> bool:
        """``Checker._compare_blocks``'s ``differs``, once per distinct pair."""
        if canonical is None or want is None:
            return (canonical is None) != (want is None)
        key = (want, canonical)
        found = self._differs.get(key)
        if found is None:
            found = self._differs[key] = not self.matches(want[0], want[1], canonical)
        return found

    def judge(
        self,
        template_id: str,
        version: str,
        variables: str | None,
        service: str | None,
        alias: str | None,
        text: str,
        request: Mapping[str, Any],
        blocks: Sequence[Mapping[str, Any]] | None,
        docs: Sequence[Mapping[str, Any]],
    ) -> tuple[tuple, dict[str, str], tuple[str, str] | None, tuple[str, str] | None] | None:
        """(the class's ``SHARED`` values, today's pieces other than the own part, their
        ``around`` (None where a key sorts between the own keys), the stored request's
        ``around`` where ``_recorded_bounds`` derives it), or None where ``Checker.judge``
        decides. ``docs`` are the recorded documents in rank order;
        ``request`` the parsed stored request, whose ``messages`` is a list."""
        template, uses_documents, names, tools = self._template(template_id, version)
        if template is None or not alias or not blocks:
            return None
        if (uses_documents and not docs) or (variables is None and names):
            return None
        renderer = self.renderer
        ingredients = self.ingredients
        found = self._models.get(alias)
        if found is None:
            today = self.checker.today
            found = self._models[alias] = renderer.model(alias, lambda: ingredients.resolve_model(alias, today), today)
        model, model_json = found
        if not model:
            return None
        route_key = (service, (template.template_id, template.version, template.sha256))
        params, param_pieces, route_known = renderer.params(route_key, template, ingredients)
        documents = ingredients.documents
        current = [DocRef(d["doc_id"], documents.get(d["doc_id"]), d.get("score")) for d in docs]
        present = tuple([d for d in current if d.text is not None])
        system = renderer.system(template, variables, present)
        if system.canonical is None or system.impure or system.error is not None:
            return None
        pieces = {"model": model_json, "system": system.canonical}
        if tools is not None:
            pieces["tools"] = tools
        pieces.update(param_pieces)

        dropped = "metadata" in request and not request["metadata"]
        keys = {k for k, v in request.items() if k not in OWN_KEYS and v is not None}
        bounds = self._bounds((alias, route_key), pieces, system.canonical)
        if not dropped and reproduces(text, request, keys, pieces, bounds):
            return (VERIFIED, [], [], [], FULL_REQUEST, template.sha256, model, []), pieces, bounds, None

        # the request moved: its blocks compared as Checker._compare_blocks compares them
        recorded = {b["block"]: (b["sha256"], b.get("algorithm")) for b in blocks}
        if any(algorithm not in _PLAIN for _, algorithm in recorded.values()):
            return None  # keyed hashes: the checker's own comparison
        moved: dict[str, str] = {}
        notes: list[str] = []
        if self._moved(recorded.get("model"), model_json):
            moved["model"] = "model_alias_moved"
            notes.append(f"model: alias {alias} now resolves to {model}")
        params_json = self._params_json.get(route_key)
        if params_json is None:
            params_json = self._params_json[route_key] = canonical_object(param_pieces) if param_pieces else ""
        if self._moved(recorded.get("params"), params_json or None):
            moved["params"] = "params_changed"
            was = _params_of(request)
            names_moved = sorted(k for k in set(params) | set(was) if params.get(k) != was.get(k))
            config = "" if route_known else " (the route is not in params.yaml)"
            notes.append(f"params: route {service}{config} differs in {', '.join(names_moved) or 'values'}")
        name = f"template {template.template_id} {template.version}"
        if self._moved(recorded.get("tools"), tools):
            moved["tools"] = "tools_changed"
            notes.append(f"tools: {name} defines other tools")
        checker = self.checker
        want = recorded.get("system")
        system_moved = want is None or not self.matches(want[0], want[1], system.canonical, system.sha256)
        if system_moved:
            call = {"template_variables_json": variables}
            if checker._template_changed(call, template, docs, current, recorded, True, notes):
                moved["system"] = "template_changed"
            if uses_documents:
                checker._documents_moved(current, recorded, moved, notes)
            if "system" not in moved:
                moved["system"] = ""
        components = sorted({c for c in moved.values() if c}, key=COMPONENTS.index)
        if not components:
            notes.append("the request differs but no ingredient could be named")
        values = (ROTTED, components, [], sorted(moved), FULL_REQUEST, template.sha256, model, notes)
        return values, pieces, bounds, self._recorded_bounds(bounds, (alias, route_key), keys, pieces, moved, request)

    def _recorded_bounds(
        self,
        bounds: tuple[str, str] | None,
        layout_key: tuple,
        keys: set[str],
        pieces: Mapping[str, str],
        moved: Mapping[str, str],
        request: Mapping[str, Any],
    ) -> tuple[str, str] | None:
        """The stored request's bytes around its own part, where they are today's with the
        recorded system prompt in place of today's: the same top-level keys, and model,
        params and tools reproduce; else None (the caller serialises the recorded values).
        These only bound the calls' own parts in the splice, which checks them against
        every call's bytes (a call they do not bound is read the slow way), so being
        derived rather than read cannot change a hash."""
        system = request.get("system")
        if bounds is None or system.__class__ is not str or keys != pieces.keys() or moved.keys() & _TOP_LEVEL:
            return None
        head, before, after = self._layouts[layout_key]
        return head, before + encode_basestring(system) + after
