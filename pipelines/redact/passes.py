"""The two walks of a batch: collect what the analyzer must see, then apply
the replacements within one trace.

Both walks visit the same leaves (``walker.JsonWalker``); between them the
distinct texts collected are analyzed once each (``Redactor``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipelines.redact.analyzer import Hit, Request
from pipelines.redact.audit import RecordTally
from pipelines.redact.entities import PERSON
from pipelines.redact.field_rules import FieldInfo, whole_entity
from pipelines.redact.identifiers import ID_KEYS, personal_entity, pseudonym
from pipelines.redact.operator_text import in_operator_line
from pipelines.redact.substitution import TraceSubstitutions, normalize


@dataclass
class Item:
    """One row or document, with the trace its replacements are consistent within."""

    scope: str
    walk: Callable[[Any], Any]
    requests: set[Request] = field(default_factory=set)
    sensitive: set[tuple[str, str]] = field(default_factory=set)
    result: Any = None
    tally: RecordTally = field(default_factory=RecordTally)


def request_for(value: str, info: FieldInfo, number: bool = False) -> Request:
    # a number is never "formatted": under an id-like key it still counts, as a whole validated match
    natural = info.natural_language and not number
    return Request(value, natural, info.context, info.structural and not number, number, info.template_text)


class Collect:
    """First pass: every text the analyzer must see, and the values under sensitive keys."""

    def __init__(self) -> None:
        self.requests: set[Request] = set()
        self.sensitive: set[tuple[str, str]] = set()
        self.seen = 0

    def text(self, value: str, path: str, info: FieldInfo) -> None:
        self.seen += 1
        if not value.strip():
            return
        entity = whole_entity(info, value)
        if entity is not None:
            self.sensitive.add((value, entity))
        else:
            self.requests.add(request_for(value, info))

    def number(self, value: int, path: str, info: FieldInfo) -> None:
        # ids too: a CPF, phone or card held as an integer is one whatever its
        # key is called (``tax_id``); a number must match as a whole, validated
        self.seen += 1
        entity = whole_entity(info, str(value))
        if entity is not None:
            self.sensitive.add((str(value), entity))
        else:
            self.requests.add(request_for(str(value), info, number=True))


class Apply:
    """Second pass: replace, within one trace."""

    def __init__(
        self,
        item: Item,
        subs: TraceSubstitutions,
        hits: dict[Request, list[Hit]],
        known: list[tuple[str, str]],
        operator: frozenset[str] = frozenset(),
    ):
        self.item = item
        self.subs = subs
        self.hits = hits
        self.known = known
        self.exact = dict(known)
        self.operator = operator  # operator lines: no person names there (``operator_text``)

    def _record(self, entity: str, normalized: str, path: str) -> None:
        self.item.tally.add(entity, normalized, path)

    def _replace(self, entity: str, value: str, path: str, number: bool = False) -> str | int:
        self._record(entity, normalize(entity, value), path)
        return self.subs.replace(entity, value, number=number)

    def text(self, value: str, path: str, info: FieldInfo) -> str | None:
        if not value.strip():
            return None
        if path.rsplit(".", 1)[-1] in ID_KEYS:
            # an email as a user id: the same pseudonym as the user_id column, not a placeholder
            entity = personal_entity(value)
            if entity is not None:
                self._record(entity, normalize(entity, value), path)
                return pseudonym(entity, value, self.subs.keys)
        entity = whole_entity(info, value)
        if entity is not None:
            return str(self._replace(entity, value, path))
        found = list(self.hits.get(request_for(value, info), ()))
        if not info.structural:
            found += mentions(value, self.known, found)
        if self.operator:
            found = [
                h for h in found if h.entity != PERSON or not in_operator_line(value, h.start, h.end, self.operator)
            ]
        if not found:
            return None
        out, last = [], 0
        for hit in sorted(found):
            out.append(value[last : hit.start])
            out.append(str(self._replace(hit.entity, value[hit.start : hit.end], path)))
            last = hit.end
        out.append(value[last:])
        return "".join(out)

    def number(self, value: int, path: str, info: FieldInfo) -> str | int | None:
        text = str(value)
        entity = whole_entity(info, text)
        if entity is not None:
            return self._replace(entity, text, path, number=True)
        for hit in self.hits.get(request_for(text, info, number=True), ()):
            return self._replace(hit.entity, text, path, number=True)
        entity = self.exact.get(text)
        return None if entity is None else self._replace(entity, text, path, number=True)


def mentions(text: str, known: list[tuple[str, str]], taken: list[Hit]) -> list[Hit]:
    """Other mentions of values detected elsewhere in the trace, whole words only."""
    found: list[Hit] = []
    for value, entity in known:
        start = text.find(value)
        while start >= 0:
            end = start + len(value)
            whole = (start == 0 or not (text[start - 1].isalnum() and value[0].isalnum())) and (
                end == len(text) or not (text[end].isalnum() and value[-1].isalnum())
            )
            if whole and all(end <= h.start or start >= h.end for h in (*taken, *found)):
                found.append(Hit(start, end, entity, 1.0))
            start = text.find(value, end)
    return found
