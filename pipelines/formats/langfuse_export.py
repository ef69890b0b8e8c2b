"""Langfuse blob export (S3/GCS/Azure): ``observations_v2``, ``scores`` and ``manifests``.

Layout: ``{prefix}{projectId}/observations_v2/{ts}.{ext}``, ``scores/{ts}.{ext}``
and ``manifests/{ts}.json``; JSONL (optionally gzipped) or Parquet. A run is
complete only once its manifest exists, so a data file waits (is not
ingested, and is listed again next run) until ``manifests/{ts}.json`` is there
too: see ``awaiting_manifest``. The manifest itself is read as one record with
no rows. Export windows overlap: the same observation or score comes in
several files, and is one call (its id is the key; the later file wins).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pipelines.formats import langfuse
from pipelines.formats.base import Normalized, RawRecord, SourceRef, each_record, table_records
from pipelines.record.rows import RecordError

FORMAT = "langfuse_export"
# only the current tables, with the export's timestamp file names: other layouts are never held back
DATA_FILE = re.compile(r"^(?P<root>.*/)(?P<table>observations_v2|scores)/(?P<ts>\d{4}-\d{2}-\d{2}T[^/]*)$")


def _stem(key: str) -> str:
    name = key.rsplit("/", 1)[-1]
    return name.split(".json")[0].split(".parquet")[0].split(".csv")[0].split(".jsonl")[0]


def awaiting_manifest(keys: Iterable[str]) -> set[str]:
    """The Langfuse data files among ``keys`` whose run has no manifest yet."""
    keys = list(keys)
    manifests = {(k.rsplit("/manifests/", 1)[0], _stem(k)) for k in keys if "/manifests/" in k}
    waiting = set()
    for key in keys:
        match = DATA_FILE.match(key)
        if match and (match["root"].rstrip("/"), _stem(key)) not in manifests:
            waiting.add(key)
    return waiting


def _is_manifest(value: Any) -> bool:
    return isinstance(value, dict) and "files" in value and ("window" in value or "exportSource" in value)


def _is_score(value: dict[str, Any]) -> bool:
    return "data_type" in value or ("value" in value and "observation_id" in value and "type" not in value)


def normalize(data: bytes, source: SourceRef, *, lines: bool = True) -> Normalized:
    out = Normalized()

    def handle(item: RawRecord) -> None:
        value = item.value
        if _is_manifest(value):
            return  # gates the run's files; nothing of its own to store
        if not isinstance(value, dict):
            raise RecordError("wrong_type", f"expected a JSON object, got {type(value).__name__}")
        if _is_score(value):
            span, fragment = langfuse.score_rows(value, FORMAT, source, item.line)
            out.spans.append(span)
            out.fragments.append(fragment)
            return
        call, span, fragment = langfuse.observation_rows(value, FORMAT, source, item.line)
        if call is not None:
            out.calls.append(call)
        out.spans.append(span)
        if fragment is not None:
            out.fragments.append(fragment)

    each_record(table_records(data, lines=lines), out, handle)
    return out


def looks_like(record: Any) -> bool:
    if _is_manifest(record):
        return True
    return isinstance(record, dict) and "trace_id" in record and "project_id" in record
