"""The text-bearing columns of `calls` and `spans` rows, and a walk over them.

Everything else (ids, hashes, model names, timestamps, token counts, tags,
segment) is never visited. ``TEXT`` columns hold free text; ``JSON`` columns
hold JSON text, walked leaf by leaf so key names serve as context and a
value is replaced in place (the same way in ``request_json`` as in the
structured message columns, which hold the same strings).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipelines.redact.walker import JsonWalker, Visitor

TEXT = "text"
JSON = "json"

_PARTS = {"text": TEXT, "arguments_json": JSON, "content_json": JSON, "native_json": JSON}
_MESSAGES = {"name": TEXT, "parts": _PARTS}

CALL_FIELDS: dict[str, Any] = {
    "template_variables_json": JSON,
    "params_extra_json": JSON,
    "system_text": TEXT,
    "messages": _MESSAGES,
    "tool_definitions": {"description": TEXT, "schema_json": JSON, "native_json": JSON},
    "request_json": JSON,
    "retrieval": {"query_text": TEXT, "documents": {"text": TEXT}},
    "tool_executions": {"arguments_json": JSON, "result_json": JSON},
    "output_text": TEXT,
    "output_messages": _MESSAGES,
    "error_message": TEXT,
    "feedback": {"value_string": TEXT, "comment": TEXT},
    "extra_json": JSON,
}
SPAN_FIELDS: dict[str, Any] = {"attributes_json": JSON}
FIELDS = {"calls": CALL_FIELDS, "spans": SPAN_FIELDS}


DOCUMENTS = "retrieval.documents"


def _plan(spec: dict[str, Any], path: str = "") -> tuple:
    """A field map as (key, TEXT | JSON | the sub-plan, the child's path) triples, paths
    joined once (rows are walked by the hundred thousand)."""
    out = []
    for key, sub in spec.items():
        child = f"{path}.{key}" if path else key
        out.append((key, sub if sub in (TEXT, JSON) else _plan(sub, child), child))
    return tuple(out)


PLANS = {table: _plan(spec) for table, spec in FIELDS.items()}


def walk_row(
    row: dict[str, Any],
    table: str,
    walker: JsonWalker,
    visitor: Visitor,
    public_document: Callable[[str | None], bool] | None = None,
) -> dict[str, Any]:
    """The row with every text-bearing column visited; the same dict when
    nothing changed. Retrieved documents whose doc_id ``public_document``
    accepts (the policy's ``public_documents``) are not visited."""
    return _walk(row, PLANS[table], "", walker, visitor, public_document)


def _walk(
    value: Any,
    plan: tuple,
    path: str,
    walker: JsonWalker,
    visitor: Visitor,
    public_document: Callable[[str | None], bool] | None,
) -> Any:
    """``value`` is a struct (dict) or a list of structs described by ``plan``."""
    if isinstance(value, list):
        changed = None
        for i, item in enumerate(value):
            if path == DOCUMENTS and public_document is not None and public_document(item.get("doc_id")):
                continue
            new = _walk(item, plan, path, walker, visitor, public_document)
            if new is not item:
                changed = changed or list(value)
                changed[i] = new
        return value if changed is None else changed
    if not isinstance(value, dict):
        return value
    changed = None
    for key, sub, child in plan:
        item = value.get(key)
        if item is None:
            continue
        if sub == TEXT or sub == JSON:
            if not isinstance(item, str):
                continue
            new = walker.walk(item, child, visitor) if sub == TEXT else walker.walk_json_text(item, child, visitor)
        else:
            new = _walk(item, sub, child, walker, visitor, public_document)
        if new is not item:
            changed = changed or dict(value)
            changed[key] = new
    return value if changed is None else changed
