"""Walk any JSON value, visiting every string and integer leaf with its path.

The walker goes into nested objects and lists, into JSON held inside strings
(tool arguments, ``request_json``), and through OpenTelemetry's
``{"key": ..., "value": {"stringValue": ...}}`` attribute lists, where the
key name is in a sibling field. It never changes a key. A visitor decides
what to do with each leaf; when it returns a replacement the containers on
the way are copied, so the input is never mutated and an untouched value
comes back as the same object.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from pipelines.redact.field_rules import FieldInfo, FieldRules, snake

# JSON inside a string inside JSON...: deeper than this is left as text
MAX_EMBEDDED_DEPTH = 6
# Integers shorter than this cannot be any entity tracelake redacts
MIN_NUMBER = 10**7
# OpenTelemetry AnyValue wrappers: transparent for paths
_WRAPPERS = {"string_value", "int_value", "double_value", "bool_value", "bytes_value", "array_value", "kvlist_value"}


class Visitor(Protocol):
    """What to do with each leaf."""

    def text(self, value: str, path: str, info: FieldInfo) -> str | None:
        """Return the replacement, or None to leave the value as it is."""

    def number(self, value: int, path: str, info: FieldInfo) -> str | int | None: ...


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def looks_like_json(text: str) -> bool:
    if len(text) < 2:
        return False
    head, tail = text[0], text[-1]
    if head in " \n\t\r" or tail in " \n\t\r":
        stripped = text.strip()
        if len(stripped) < 2:
            return False
        head, tail = stripped[0], stripped[-1]
    return (head == "{" and tail == "}") or (head == "[" and tail == "]")


_STYLES = (
    {"separators": (",", ":"), "ensure_ascii": False},
    {"separators": (", ", ": "), "ensure_ascii": False},
    {"separators": (",", ":"), "ensure_ascii": True},
    {"separators": (", ", ": "), "ensure_ascii": True},
)


def dumps_like(original: str, parsed: Any, value: Any) -> str:
    """Serialize ``value`` in the style ``original`` (the text ``parsed`` came
    from) was written in, so that undoing a redaction gives back the same bytes
    (the first style when none gives ``original`` back)."""
    for style in _STYLES:
        if json.dumps(parsed, **style) == original:
            return json.dumps(value, **style)
    return json.dumps(value, **_STYLES[0])


# {"key": "phone", "value": ...}, {"field": "cpf", "eq": ...}: the name of the
# value is in a sibling (OpenTelemetry attributes, filters in tool arguments)
_NAME_KEYS = ("key", "field", "attribute", "column", "property", "param")
_VALUE_KEYS = frozenset({"value", "eq", "equals", "ne", "contains", "like", "match", "in", "values"})


def _named_attribute(value: dict) -> str | None:
    if len(value) > 4 or _VALUE_KEYS.isdisjoint(value):
        return None
    for key in _NAME_KEYS:
        name = value.get(key)
        if isinstance(name, str) and 0 < len(name) <= 80:
            return name
    return None


def _child_path(value: dict, attribute: str | None, key: Any, path: str) -> str:
    """The path of ``value[key]`` (``attribute``: ``_named_attribute(value)``)."""
    if attribute is not None and key in _VALUE_KEYS:
        return join(path, snake(attribute))
    name = snake(key) if isinstance(key, str) else str(key)
    # {"arrayValue": {"values": [...]}} keeps the attribute's path
    transparent = name in _WRAPPERS or (name == "values" and len(value) == 1)
    return path if transparent else join(path, name)


class JsonWalker:
    def __init__(self, rules: FieldRules):
        self.rules = rules

    def walk(self, value: Any, path: str, visitor: Visitor, depth: int = 0) -> Any:
        if isinstance(value, str):
            return self._string(value, path, visitor, depth)
        if isinstance(value, dict):
            return self._object(value, path, visitor, depth)
        if isinstance(value, list):
            changed = None
            for i, item in enumerate(value):
                new = self.walk(item, path, visitor, depth)
                if new is not item:
                    changed = changed or list(value)
                    changed[i] = new
            return value if changed is None else changed
        if isinstance(value, int) and not isinstance(value, bool):
            info = self.rules.info(path)
            if info.public or (abs(value) < MIN_NUMBER and info.sensitive is None and info.identity is None):
                return value
            new = visitor.number(value, path, info)
            return value if new is None else new
        return value

    def walk_json_text(self, text: str, path: str, visitor: Visitor, depth: int = 0) -> str:
        """A column or value that holds JSON text: walk the parsed value, re-serialize if it changed."""
        try:
            parsed = json.loads(text)
        except ValueError:
            return self._leaf(text, path, visitor)
        new = self.walk(parsed, path, visitor, depth + 1)
        return text if new is parsed else dumps_like(text, parsed, new)

    def _object(self, value: dict, path: str, visitor: Visitor, depth: int) -> dict:
        changed = None
        attribute = _named_attribute(value)
        for key, item in value.items():
            new = self.walk(item, _child_path(value, attribute, key, path), visitor, depth)
            if new is not item:
                changed = changed or dict(value)
                changed[key] = new
        return value if changed is None else changed

    def _string(self, value: str, path: str, visitor: Visitor, depth: int) -> str:
        info = self.rules.info(path)
        if info.public:
            return value
        if info.sensitive is None and depth < MAX_EMBEDDED_DEPTH and looks_like_json(value):
            return self.walk_json_text(value, path, visitor, depth)
        new = visitor.text(value, path, info)
        return value if new is None else new

    def _leaf(self, text: str, path: str, visitor: Visitor) -> str:
        info = self.rules.info(path)
        if info.public:
            return text
        new = visitor.text(text, path, info)
        return text if new is None else new
