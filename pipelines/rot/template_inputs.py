"""What a template is given when the rot check renders it: the retrieved documents as the
record has them, and each document as a dict that notes which of its fields the template
read (a template that prints scores renders a different prompt per call)."""

from __future__ import annotations

from typing import Any, NamedTuple

# the seeds a template's random choices are rendered under: a template that reads one is impure
SEEDS = (0, 1)


class DocRef(NamedTuple):
    """A retrieved document as the record has it (a tuple: a run builds one per document
    of every set, and a frozen dataclass costs several times as much to make)."""

    doc_id: str
    text: str | None
    score: float | None


class ObservedDocument(dict):
    """A document as a template sees it (a plain dict to the template), noting
    which fields the template read; "*" when it read the document whole."""

    __slots__ = ("_seen",)

    def __init__(self, fields: dict[str, Any], seen: set[str]):
        super().__init__(fields)
        self._seen = seen

    def __getitem__(self, key):
        self._seen.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._seen.add(key)
        return super().get(key, default)

    def _whole(self):
        self._seen.add("*")

    def __iter__(self):
        self._whole()
        return super().__iter__()

    def items(self):
        self._whole()
        return super().items()

    def keys(self):
        self._whole()
        return super().keys()

    def values(self):
        self._whole()
        return super().values()

    def __repr__(self):
        self._whole()
        return super().__repr__()

    __str__ = __repr__

    def __eq__(self, other):
        self._whole()
        return super().__eq__(other)

    __hash__ = None
