"""Source formats: one module per format, each a pure function from bytes to rows.

``normalize_object`` picks the module for an object (a per-prefix override
first, then detection from the first record) and runs it. Detection asks each
module's ``looks_like`` in the order below, most specific first; Parquet
objects are detected from their first row.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice
from types import ModuleType

from pipelines.formats import (
    agent_events,
    agent_log_lines,
    anthropic_batch,
    anthropic_messages,
    frozen_call,
    langfuse_api,
    langfuse_export,
    langsmith,
    otlp_json,
    phoenix,
)
from pipelines.formats.base import (
    MAX_RECORD_BYTES,
    PARSE_ERRORS,
    UNEXPECTED,
    Normalized,
    Problem,
    RawRecord,
    SourceRef,
    is_parquet,
    json_records,
    parquet_records,
    strict_loads,
)

FORMATS: dict[str, ModuleType] = {
    frozen_call.FORMAT: frozen_call,
    agent_events.FORMAT: agent_events,
    agent_log_lines.FORMAT: agent_log_lines,
    otlp_json.FORMAT: otlp_json,
    phoenix.FORMAT: phoenix,
    langfuse_api.FORMAT: langfuse_api,
    langfuse_export.FORMAT: langfuse_export,
    langsmith.FORMAT: langsmith,
    anthropic_batch.FORMAT: anthropic_batch,
    anthropic_messages.FORMAT: anthropic_messages,
}
LINE_SUFFIXES = (".jsonl", ".ndjson")
# records looked at to tell an object's format
DETECT_RECORDS = 20
COMPRESSION_SUFFIXES = (".gz", ".zst")


def logical_name(key: str) -> str:
    """The key without its compression suffix (``a.jsonl.gz`` -> ``a.jsonl``)."""
    for suffix in COMPRESSION_SUFFIXES:
        if key.endswith(suffix):
            return key[: -len(suffix)]
    return key


def is_line_delimited(key: str) -> bool:
    return logical_name(key).endswith(LINE_SUFFIXES)


def _first_line(data: bytes) -> object | None:
    """The first non-blank line's value when that line alone is strict JSON, else None.
    Then it is also what ``json_records(data)`` yields first (the whole object is
    that line, or JSON Lines after it), found without reading the object as one document."""
    start = len(data) - len(data.lstrip())
    end = data.find(b"\n", start)
    line = data[start:] if end == -1 else data[start:end]
    if not line.strip() or line.startswith(b"[") or len(line) > MAX_RECORD_BYTES:
        return None  # an array is read element by element: json_records decides
    try:
        return strict_loads(line)
    except PARSE_ERRORS:
        return None


def _first_record(data: bytes, lines: bool = False) -> object | None:
    """The first record that parses (of the first few): one bad record at the
    top of an object must not hide its format. ``lines``: the key says JSON
    Lines, so the first line is tried alone first (the same answer, cheaper)."""
    if is_parquet(data):
        first = next(iter(parquet_records(data, limit=1)), None)
        return first.value if isinstance(first, RawRecord) else None
    if lines:
        value = _first_line(data)
        if value is not None:
            return value
    for item in islice(json_records(data), DETECT_RECORDS):
        if isinstance(item, RawRecord):
            return item.value
    return None


def detect(data: bytes, lines: bool = False) -> str | None:
    record = _first_record(data, lines)
    for name, module in FORMATS.items():
        if module.looks_like(record):
            return name
    return None


def format_for(key: str, data: bytes, overrides: Mapping[str, str] | None = None) -> str | None:
    """The override for the longest matching prefix, else the detected format."""
    for prefix in sorted(overrides or {}, key=len, reverse=True):
        if key.startswith(prefix):
            return overrides[prefix]
    return detect(data, is_line_delimited(key))


def normalize_object(
    data: bytes, source: SourceRef, overrides: Mapping[str, str] | None = None
) -> tuple[str | None, Normalized]:
    """Decompressed object bytes -> (format name, rows and problems)."""
    name = format_for(source.key, data, overrides)
    if name is None and _first_record(data) is None:
        lines = is_line_delimited(source.key)
        problems = list(islice(json_records(data, lines=lines), DETECT_RECORDS + 1))
        if 0 < len(problems) <= DETECT_RECORDS and all(isinstance(p, Problem) for p in problems):
            # every record of the object is bad (one document nested too deep, say): each says why, by line
            return None, Normalized(problems=problems, records_read=len({p.line for p in problems} - {None}))
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
    try:
        return name, FORMATS[name].normalize(data, source, lines=is_line_delimited(source.key))
    except UNEXPECTED as e:
        # a record a format did not foresee must not stop the day: the object is quarantined whole
        problem = Problem(
            "invalid_object", f"the {name} reader failed on this object ({type(e).__name__}); report it with the key"
        )
        return name, Normalized(problems=[problem])


__all__ = ["FORMATS", "Normalized", "Problem", "SourceRef", "detect", "normalize_object"]
