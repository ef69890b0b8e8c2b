"""Source formats: one module per format, each a pure function from bytes to rows.

``normalize_object`` picks the module for an object (a per-prefix override
first, then detection from the first record) and runs it. Detection asks each
module's ``looks_like`` in the order below, most specific first; Parquet
objects are detected from their first row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import ModuleType

from pipelines.formats import (
    agent_events,
    anthropic_batch,
    anthropic_messages,
    frozen_call,
    langfuse_api,
    langfuse_export,
    langsmith,
    otlp_json,
    phoenix,
)
from pipelines.formats.base import Normalized, Problem, RawRecord, SourceRef, is_parquet, parquet_records

FORMATS: dict[str, ModuleType] = {
    frozen_call.FORMAT: frozen_call,
    agent_events.FORMAT: agent_events,
    otlp_json.FORMAT: otlp_json,
    phoenix.FORMAT: phoenix,
    langfuse_api.FORMAT: langfuse_api,
    langfuse_export.FORMAT: langfuse_export,
    langsmith.FORMAT: langsmith,
    anthropic_batch.FORMAT: anthropic_batch,
    anthropic_messages.FORMAT: anthropic_messages,
}
LINE_SUFFIXES = (".jsonl", ".ndjson")
COMPRESSION_SUFFIXES = (".gz", ".zst")


def logical_name(key: str) -> str:
    """The key without its compression suffix (``a.jsonl.gz`` -> ``a.jsonl``)."""
    for suffix in COMPRESSION_SUFFIXES:
        if key.endswith(suffix):
            return key[: -len(suffix)]
    return key


def is_line_delimited(key: str) -> bool:
    return logical_name(key).endswith(LINE_SUFFIXES)


def _first_record(data: bytes) -> object | None:
    if is_parquet(data):
        first = next(iter(parquet_records(data, limit=1)), None)
        return first.value if isinstance(first, RawRecord) else None
    head = data.lstrip()
    first_line = head.split(b"\n", 1)[0]
    for candidate in (first_line, head):
        try:
            value = json.loads(candidate)
        except (ValueError, UnicodeDecodeError):
            continue
        return value[0] if isinstance(value, list) and value else value
    return None


def detect(data: bytes) -> str | None:
    record = _first_record(data)
    for name, module in FORMATS.items():
        if module.looks_like(record):
            return name
    return None


def format_for(key: str, data: bytes, overrides: Mapping[str, str] | None = None) -> str | None:
    """The override for the longest matching prefix, else the detected format."""
    for prefix in sorted(overrides or {}, key=len, reverse=True):
        if key.startswith(prefix):
            return overrides[prefix]
    return detect(data)


def normalize_object(
    data: bytes, source: SourceRef, overrides: Mapping[str, str] | None = None
) -> tuple[str | None, Normalized]:
    """Decompressed object bytes -> (format name, rows and problems)."""
    name = format_for(source.key, data, overrides)
    if name is None and _first_record(data) is None:
        problem = Problem("invalid_json", "expected a JSON document or JSON Lines; the first record does not parse")
        return None, Normalized(problems=[problem])
    if name is None:
        known = ", ".join(FORMATS)
        problem = Problem(
            "unknown_format",
            f"could not tell the format from the first record (known: {known}); "
            "set a per-prefix override in TRACELAKE_FORMATS if the object is valid",
        )
        return None, Normalized(problems=[problem])
    if name not in FORMATS:
        raise ValueError(f"format override names unknown format {name!r}; known: {', '.join(FORMATS)}")
    return name, FORMATS[name].normalize(data, source, lines=is_line_delimited(source.key))


__all__ = ["FORMATS", "Normalized", "Problem", "SourceRef", "detect", "normalize_object"]
