"""Templates that print each retrieved document's score, rendered once per ingredient set.

A template such as ``{% for d in documents %}<document score="{{ '%.3f' |
format(d.score) }}">`` renders a different prompt for every call, because
scores differ on every call, although everything else about the rendering is
the same for all calls sharing the template version, variables and documents.
Instead of rendering the whole template per call, the template is inspected
once (its AST): when every read of ``score`` sits in an output expression
inside a ``{% for d in documents %}`` loop that reads nothing but the loop's
document, those expressions are cut out as slots. The rest (the skeleton) is
rendered once per ingredient set, and each slot is evaluated per distinct
(document, score) by Jinja itself, with the same environment and sandbox, so
filling the slots gives the bytes a full rendering gives. Any other use of a
score (a test, a sort, a ``set``, ``tojson``, a score read outside such a
loop) makes ``PrintedScores.of`` return None, and the caller renders per call.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jinja2 import Template, nodes

from pipelines.rot.ingredients import TemplateVersion
from pipelines.rot.render import environment
from pipelines.rot.template_inputs import SEEDS, DocRef, ObservedDocument

SLOT_FUNCTION = "__rot_score_slot"
_MARK = re.compile("\x00(\\d+)\x01(\\d+)\x00")


_DOCUMENT_FIELDS = frozenset({"doc_id", "text"})


def never_reads_scores(template: TemplateVersion) -> bool:
    """Can the template be seen to read no retrieval score, from its AST alone? True when
    ``documents`` is only iterated by ``{% for d in documents %}`` and each ``d`` is only
    read as ``d.doc_id`` / ``d.text``; anything else (printing ``d`` whole, filters over
    ``documents``, computed keys, ``tojson``, includes) is left to a rendering to tell."""
    tree = template._ast
    if tree is None or "tojson" in template.source:
        return False
    if any(True for _ in tree.find_all((nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends))):
        return False
    parent: dict[int, nodes.Node] = {}
    for node in (tree, *tree.find_all(nodes.Node)):
        for child in node.iter_child_nodes():
            parent[id(child)] = node
    loop_vars: set[str] = set()
    iterated: set[int] = set()
    for loop in tree.find_all(nodes.For):
        if isinstance(loop.iter, nodes.Name) and loop.iter.name == "documents":
            if not isinstance(loop.target, nodes.Name):
                return False
            loop_vars.add(loop.target.name)
            iterated.add(id(loop.iter))
    for name in tree.find_all(nodes.Name):
        if name.name == "documents":
            if id(name) not in iterated:
                return False
        elif name.name in loop_vars:
            if name.ctx == "store":
                if not isinstance(parent.get(id(name)), nodes.For):
                    return False
                continue
            up = parent.get(id(name))
            if isinstance(up, nodes.Getattr) and up.attr in _DOCUMENT_FIELDS:
                continue
            if isinstance(up, nodes.Getitem) and isinstance(up.arg, nodes.Const) and up.arg.value in _DOCUMENT_FIELDS:
                continue
            return False
    return True


def _escape(text: str) -> str:
    """The inside of the JSON string canonical_json makes of ``text``."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _reads_score(node: nodes.Node) -> bool:
    if isinstance(node, nodes.Getattr) and node.attr == "score":
        return True
    return isinstance(node, nodes.Const) and node.value == "score"


def _score_reads(node: nodes.Node) -> int:
    return sum(1 for n in node.find_all((nodes.Getattr, nodes.Const)) if _reads_score(n)) + int(_reads_score(node))


def _reads_only(expr: nodes.Node, var: str, allowed: frozenset[str]) -> bool:
    """Does the expression read its document only as ``d.<field>`` / ``d['<field>']``
    with fields in ``allowed``, and nothing but the document? (``d.score`` alone: its
    value depends on the score alone and is cached by it.)"""
    names = [n for n in (expr, *expr.find_all(nodes.Name)) if isinstance(n, nodes.Name)]
    if any(n.name != var for n in names):
        return False
    reads = [
        n
        for n in (expr, *expr.find_all((nodes.Getattr, nodes.Getitem)))
        if isinstance(n, (nodes.Getattr, nodes.Getitem))
    ]
    field_reads = sum(
        1
        for n in reads
        if isinstance(n.node, nodes.Name)
        and n.node.name == var
        and (
            n.attr in allowed
            if isinstance(n, nodes.Getattr)
            else isinstance(n.arg, nodes.Const) and n.arg.value in allowed
        )
    )
    return len(names) == field_reads


_SCORE = frozenset({"score"})
_PRINTABLE_FIELDS = frozenset({"doc_id", "text", "score"})


@dataclass(frozen=True)
class Skeleton:
    """A rendering with holes: ``parts`` alternate text and (slot, document position)."""

    parts: tuple[str | tuple[int, int], ...]
    documents: tuple[DocRef, ...]
    # the text parts JSON-escaped: JSON escapes character by character, so the
    # canonical JSON of the whole is the escaped parts and values joined in quotes
    escaped: tuple[str | tuple[int, int], ...] = ()


class PrintedScores:
    """A template whose only use of retrieval scores is printing them (see module docstring)."""

    def __init__(
        self,
        template: TemplateVersion,
        skeleton: Template,
        slots: list[Template],
        loop_vars: list[str],
        score_only: list[bool],
        reads_score: list[bool] | None = None,
    ):
        self.template = template
        self._skeleton = skeleton
        self._slots = slots
        self._loop_vars = loop_vars
        self._score_only = score_only
        self._reads_score = reads_score if reads_score is not None else [True] * len(slots)
        self._values: dict[tuple, str] = {}
        self._escaped: dict[tuple, str] = {}
        self._skeletons: dict[tuple, Skeleton | None] = {}
        self._counted: dict[tuple, tuple[Skeleton | None, bool]] = {}

    @classmethod
    def of(cls, template: TemplateVersion, *, document_fields: bool = False) -> PrintedScores | None:
        """The template cut into skeleton and slots, or None when it reads scores any other way.

        With ``document_fields`` every output expression in such a loop that reads its
        document only as ``d.doc_id`` / ``d.text`` / ``d.score`` is a slot too, so a
        skeleton that reads no document field depends on the number of documents alone
        (``render_counted``); None then also when nothing could be cut."""
        source = template.source
        if template.reaches_impurity or "tojson" in source or template._ast is None:
            return None
        # read on the template's own tree; only a template that is cut is copied first
        # dynamic item access could reach a score by a computed key
        if any(not isinstance(n.arg, nodes.Const) for n in template._ast.find_all(nodes.Getitem)):
            return None
        total = _score_reads(template._ast)
        if total == 0 and not document_fields:
            return None  # prints no score: grouping alone handles it
        tree = copy.deepcopy(template._ast)
        slots: list[Template] = []
        loop_vars: list[str] = []
        score_only: list[bool] = []
        reads_score: list[bool] = []
        found = 0
        env = environment()
        for loop in tree.find_all(nodes.For):
            if not (
                isinstance(loop.iter, nodes.Name)
                and loop.iter.name == "documents"
                and isinstance(loop.target, nodes.Name)
            ):
                continue
            var = loop.target.name
            for output in loop.find_all(nodes.Output):
                for i, expr in enumerate(output.nodes):
                    if isinstance(expr, nodes.TemplateData):
                        continue
                    scored = _score_reads(expr) > 0
                    if not scored and not (document_fields and _reads_only(expr, var, _PRINTABLE_FIELDS)):
                        continue
                    names = {n.name for n in expr.find_all(nodes.Name)} | (
                        {expr.name} if isinstance(expr, nodes.Name) else set()
                    )
                    if names != {var}:
                        return None
                    found += _score_reads(expr)
                    slot = nodes.Template([nodes.Output([copy.deepcopy(expr)], lineno=expr.lineno)], lineno=1)
                    slots.append(env.from_string(slot.set_environment(env)))
                    loop_vars.append(var)
                    score_only.append(_reads_only(expr, var, _SCORE))
                    reads_score.append(scored)
                    call = nodes.Call(
                        nodes.Name(SLOT_FUNCTION, "load", lineno=expr.lineno),
                        [nodes.Const(len(slots) - 1, lineno=expr.lineno), nodes.Name(var, "load", lineno=expr.lineno)],
                        [],
                        None,
                        None,
                        lineno=expr.lineno,
                    )
                    output.nodes[i] = call
        if found != total:
            return None  # a score read outside a printed slot (nested loops count twice too)
        if not slots:
            return None
        skeleton = env.from_string(tree.set_environment(env))
        return cls(template, skeleton, slots, loop_vars, score_only, reads_score)

    def skeleton(self, variables_json: str | None, documents: Sequence[DocRef], clock: datetime) -> Skeleton | None:
        """The rendering with each printed score left as a hole; None when it fails or
        reads a score after all (then the caller renders per call)."""
        key = (variables_json, tuple((d.doc_id, d.text) for d in documents))
        if key in self._skeletons:
            return self._skeletons[key]
        found = self._skeletons[key] = self._render_skeleton(variables_json, documents, clock)
        return found

    def render_counted(
        self, variables_json: str | None, documents: Sequence[DocRef], clock: datetime
    ) -> tuple[str, bool] | None:
        """(the canonical JSON of the full rendering with these documents and their
        scores, whether it read a score) from a skeleton rendered once per variables and
        number of documents and slots rendered once per distinct document (``of(...,
        document_fields=True)``), joined already escaped (see ``canonical``); None when
        the skeleton reads a document field itself or a slot does not render (then
        render in full, which also says why)."""
        key = (variables_json, len(documents))
        counted = self._counted.get(key)
        if counted is None:
            blank = [DocRef("", "", None)] * len(documents)
            skeleton = self._render_skeleton(variables_json, blank, clock, reads_allowed=False)
            reads_score = self._reads_score
            # whether a filled-in rendering reads a score: the skeleton's slots decide it
            reads = skeleton is not None and any(p.__class__ is not str and reads_score[p[0]] for p in skeleton.parts)
            counted = self._counted[key] = (skeleton, reads)
        skeleton, reads = counted
        if skeleton is None:
            return None
        try:
            parts = self._filled(documents, skeleton.escaped, [d.score for d in documents], self._escaped, _escape)
        except Exception:
            return None
        return '"' + "".join(parts) + '"', reads

    def _render_skeleton(
        self, variables_json: str | None, documents: Sequence[DocRef], clock: datetime, *, reads_allowed: bool = True
    ) -> Skeleton | None:
        import random

        variables = json.loads(variables_json) if variables_json else {}
        seen: set[str] = set()
        docs = [ObservedDocument({"doc_id": d.doc_id, "text": d.text, "score": None}, seen) for d in documents]
        position = {id(doc): i for i, doc in enumerate(docs)}

        def slot(k: int, doc: Any) -> str:
            return f"\x00{k}\x01{position[id(doc)]}\x00"

        rng = random.Random(SEEDS[0])
        context = {
            **variables,
            "documents": list(docs),
            "now": lambda: clock,
            "random": rng.random,
            SLOT_FUNCTION: slot,
        }
        try:
            text = self._skeleton.render(context)
        except Exception:
            return None
        if "score" in seen or "*" in seen or (seen and not reads_allowed):
            return None
        parts: list[str | tuple[int, int]] = []
        at = 0
        for mark in _MARK.finditer(text):
            parts.append(text[at : mark.start()])
            parts.append((int(mark.group(1)), int(mark.group(2))))
            at = mark.end()
        parts.append(text[at:])
        if any(isinstance(p, str) and "\x00" in p for p in parts):
            return None  # a NUL the template printed itself: the holes cannot be told apart
        escaped = tuple(_escape(p) if isinstance(p, str) else p for p in parts)
        return Skeleton(tuple(parts), tuple(documents), escaped)

    def text(self, skeleton: Skeleton, scores: Sequence[float | None]) -> str:
        """The full rendering with these scores (one per skeleton document) in the holes.
        Raises what Jinja raises when a slot does not render (e.g. a missing score)."""
        return "".join(self._filled(skeleton.documents, skeleton.parts, scores, self._values, str))

    def canonical(self, skeleton: Skeleton, scores: Sequence[float | None]) -> str:
        """``canonical_json(self.text(skeleton, scores))``, without building the text."""
        return '"' + "".join(self._filled(skeleton.documents, skeleton.escaped, scores, self._escaped, _escape)) + '"'

    def _filled(
        self,
        documents: Sequence[DocRef],
        parts: Sequence[str | tuple[int, int]],
        scores: Sequence[float | None],
        values: dict[tuple, str],
        as_part: Callable[[str], str],
    ) -> list[str]:
        out = []
        score_only = self._score_only
        reads_score = self._reads_score
        for part in parts:
            if part.__class__ is str:
                out.append(part)
                continue
            k, i = part
            score = scores[i]
            d = documents[i]
            if score_only[k]:
                key = (k, score)
            elif reads_score[k]:
                key = (k, d.doc_id, d.text, score)
            else:
                key = (k, d.doc_id, d.text)
            value = values.get(key)
            if value is None:
                value = values[key] = as_part(self._slot(k, DocRef(d.doc_id, d.text, score)))
            out.append(value)
        return out

    def _slot(self, k: int, d: DocRef) -> str:
        slot = self._slots[k]
        doc = {"score": d.score} if self._score_only[k] else {"doc_id": d.doc_id, "text": d.text, "score": d.score}
        # a slot reads its document and nothing else, so it needs no globals (shared=True)
        return "".join(slot.root_render_func(slot.new_context({self._loop_vars[k]: doc}, shared=True)))
