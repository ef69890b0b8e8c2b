"""The two walks of a batch: collect what the analyzer must see, then apply
the replacements within one trace.

Both walks visit the same leaves (``walker.JsonWalker``); between them the
texts collected are analyzed once each (``Redactor``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipelines.redact.analyzer import Hit, Request
from pipelines.redact.audit import RecordTally
from pipelines.redact.field_rules import FieldInfo
from pipelines.redact.identifiers import ID_KEYS, personal_entity, pseudonym
from pipelines.redact.substitution import TraceSubstitutions, normalize
from pipelines.redact.walker import NUMBER_LEAF, TEXT_LEAF, JsonWalker, Leaf, rebuilt


@dataclass
class Item:
    """One row or document, with the trace its replacements are consistent within."""

    scope: str
    walk: Callable[[Any], Any]
    requests: set[Request] = field(default_factory=set)
    sensitive: set[tuple[str, str]] = field(default_factory=set)
    result: Any = None
    tally: RecordTally = field(default_factory=RecordTally)
    # with a screen: each text column value as the apply pass wrote it (value, TEXT | JSON, path)
    written: list[tuple[str, str, str]] | None = None


def request_for(value: str, info: FieldInfo, number: bool = False) -> Request:
    # a number is never "formatted": under an id-like key it still counts, as a whole validated match
    natural = info.natural_language and not number
    return Request(value, natural, info.context, info.structural and not number, number, info.template_text)


# What one JSON text holds for the analyzer: walked once per batch, reused for every copy
# (text, path, the walker): a text under another call's rules (a templated call's twin) is its own
JsonKey = tuple[str, str, JsonWalker]


@dataclass(frozen=True)
class JsonContent:
    requests: frozenset[Request]
    sensitive: frozenset[tuple[str, str]]
    leaves: int
    # what ``walker.flatten`` found (None: no JSON, one text leaf)
    flat: tuple[Leaf, ...] | None = None


class Collect:
    """First pass: every text the analyzer must see. A JSON text seen before in
    the batch (a tool definition, a message repeated in a conversation) is not
    walked again."""

    def __init__(self, item: Item, memo: dict[JsonKey, JsonContent]):
        self.item = item
        self.memo = memo
        self.seen = 0
        self._open: list[tuple[set, set, int]] = []

    def json_text(self, walker: JsonWalker, text: str, path: str, depth: int) -> str:
        """A JSON text: its leaves flattened once (``walker.flatten``), visited from that list."""
        key = (text, path, walker)
        content = self.memo.get(key)
        if content is not None:
            self.item.requests |= content.requests
            self.item.sensitive |= content.sensitive
            if self._open:
                self._open[-1][0].update(content.requests)
                self._open[-1][1].update(content.sensitive)
            self.seen += content.leaves
            return text
        requests: set[Request] = set()
        sensitive: set[tuple[str, str]] = set()
        seen_before = self.seen
        self._open.append((requests, sensitive, seen_before))
        flat = walker.flatten(text, path, depth)
        if flat is None:
            info = walker.rules.info(path)
            if not info.public:
                self.text(text, path, info)
        else:
            for leaf in flat:
                if leaf.kind == TEXT_LEAF:
                    self.text(leaf.value, leaf.path, leaf.info)
                elif leaf.kind == NUMBER_LEAF:
                    self.number(leaf.value, leaf.path, leaf.info)
                else:
                    self.json_text(walker, leaf.value, leaf.path, leaf.depth)
        self._open.pop()
        self.memo[key] = JsonContent(frozenset(requests), frozenset(sensitive), self.seen - seen_before, flat)
        if self._open:
            self._open[-1][0].update(requests)
            self._open[-1][1].update(sensitive)
        return text

    def _add(self, request: Request | None, sensitive: tuple[str, str] | None) -> None:
        self.seen += 1
        if request is not None:
            self.item.requests.add(request)
            if self._open:
                self._open[-1][0].add(request)
        if sensitive is not None:
            self.item.sensitive.add(sensitive)
            if self._open:
                self._open[-1][1].add(sensitive)

    def text(self, value: str, path: str, info: FieldInfo) -> None:
        if not value.strip():
            self._add(None, None)
        elif info.sensitive is not None:
            self._add(None, (value, info.sensitive))
        else:
            self._add(request_for(value, info), None)

    def number(self, value: int, path: str, info: FieldInfo) -> None:
        # ids too: a CPF, phone or card held as an integer is one whatever its
        # key is called (``tax_id``); a number must match as a whole, validated
        if info.sensitive is not None:
            self._add(None, (str(value), info.sensitive))
        else:
            self._add(request_for(str(value), info, number=True), None)


class Apply:
    """Third pass: replace, within one trace. A JSON text whose leaves had no
    hits and holds none of the trace's known values is returned unwalked; one
    already redacted in this trace is reused, with its tally replayed."""

    def __init__(
        self,
        item: Item,
        subs: TraceSubstitutions,
        hits: dict[Request, list[Hit]],
        known: list[tuple[str, str]],
        contents: dict[JsonKey, JsonContent],
        done: dict[JsonKey, tuple[str, list[tuple[str, str, str]]]],
        screen: bool = False,
    ):
        self.item = item
        self.subs = subs
        self.hits = hits
        self.known = known
        self.exact = dict(known)
        self.contents = contents
        self.done = done
        self._open: list[list[tuple[str, str, str]]] = []
        # for ``walk_row(inspect=...)``: with ``screen``, each column value as written is kept for it
        self.inspect = None
        if screen:
            item.written = []
            self.inspect = lambda value, kind, path: item.written.append((value, kind, path))

    def _clean(self, key: JsonKey) -> bool:
        content = self.contents.get(key)
        if content is None or content.sensitive or any(self.hits.get(r) for r in content.requests):
            return False
        text = key[0]
        return not any(value in text for value, _ in self.known)

    def json_text(self, walker: JsonWalker, text: str, path: str, depth: int) -> str:
        """A JSON text, from the leaves the collect pass flattened: only the texts
        that change are written back, into a fresh parse (no walk)."""
        key = (text, path, walker)
        if self._clean(key):
            return text
        found = self.done.get(key)
        if found is not None:
            result, events = found
            for event in events:
                self._record(*event)
            return result
        content = self.contents.get(key)
        if content is None:
            flat = walker.flatten(text, path, depth)
        else:
            flat = content.flat
        self._open.append([])
        if flat is None:
            info = walker.rules.info(path)
            new = None if info.public else self.text(text, path, info)
            result = text if new is None else new
        else:
            changes = []
            for leaf in flat:
                if leaf.kind == TEXT_LEAF:
                    new = self.text(leaf.value, leaf.path, leaf.info)
                elif leaf.kind == NUMBER_LEAF:
                    new = self.number(leaf.value, leaf.path, leaf.info)
                else:
                    new = self.json_text(walker, leaf.value, leaf.path, leaf.depth)
                    new = None if new is leaf.value else new
                if new is not None:
                    changes.append((leaf.at, new))
            result = rebuilt(text, changes) if changes else text
        events = self._open.pop()
        self.done[key] = (result, events)
        if self._open:
            self._open[-1].extend(events)
        return result

    def _record(self, entity: str, normalized: str, path: str) -> None:
        self.item.tally.add(entity, normalized, path)
        if self._open:
            self._open[-1].append((entity, normalized, path))

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
        if info.sensitive is not None:
            return str(self._replace(info.sensitive, value, path))
        found = list(self.hits.get(request_for(value, info), ()))
        if not info.structural:
            found += mentions(value, self.known, found)
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
        if info.sensitive is not None:
            return self._replace(info.sensitive, text, path, number=True)
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
