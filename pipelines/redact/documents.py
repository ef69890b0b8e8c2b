"""Reading and writing trace documents for the CLI: one JSON document, a JSON
array of documents, or JSON Lines, written back in the shape they came in."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

Shape = Literal["object", "array", "lines"]


class DocumentError(ValueError):
    """Input that is not JSON or JSON Lines; says where, never quotes it."""


@dataclass
class Documents:
    items: list[Any]
    shape: Shape
    pretty: bool = False


def read_documents(text: str) -> Documents:
    stripped = text.strip()
    if not stripped:
        return Documents([], "lines")
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError:
        pass
    else:
        pretty = "\n" in stripped
        if isinstance(value, list):
            return Documents(value, "array", pretty)
        return Documents([value], "object", pretty)
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise DocumentError(
                f"line {number} is not valid JSON ({e.msg} at column {e.colno}); "
                "expected one JSON document, a JSON array, or one JSON document per line"
            ) from None
    return Documents(items, "lines")


def write_documents(documents: Documents) -> str:
    def dump(value: Any) -> str:
        if documents.pretty:
            return json.dumps(value, ensure_ascii=False, indent=2)
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    if documents.shape == "lines":
        return "".join(json.dumps(d, ensure_ascii=False, separators=(",", ":")) + "\n" for d in documents.items)
    if documents.shape == "array":
        return dump(documents.items) + "\n"
    return dump(documents.items[0]) + "\n"
