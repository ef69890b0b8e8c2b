"""Langfuse public API trace JSON: ``GET /api/public/traces/{id}`` with its
observations and scores (one trace per document, an array of them, or JSONL).

Fields are camelCase here and are renamed to the blob export's snake_case, so
both read through langfuse.py. Trace-level user, session, release, tags and
environment fill in what an observation does not carry.
"""

from __future__ import annotations

import re
from typing import Any

from pipelines.formats import langfuse
from pipelines.formats.base import Normalized, RawRecord, SourceRef, each_record, json_records
from pipelines.record.rows import RecordError

FORMAT = "langfuse_api"
RENAMED = {"providedModelName": "provided_model_name", "model": "model"}
TRACE_FIELDS = {"userId": "user_id", "sessionId": "session_id", "release": "release", "tags": "tags"}


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _renamed(row: dict[str, Any]) -> dict[str, Any]:
    return {RENAMED.get(k, snake(k)): v for k, v in row.items()}


def normalize(data: bytes, source: SourceRef, *, lines: bool = False) -> Normalized:
    out = Normalized()

    def handle(item: RawRecord) -> None:
        trace = item.value
        if not isinstance(trace, dict) or not trace.get("id"):
            raise RecordError("invalid_record", "expected a Langfuse trace object with an id")
        context = {snake_key: trace.get(key) for key, snake_key in TRACE_FIELDS.items()}
        context["trace_name"] = trace.get("name")
        context["environment"] = trace.get("environment")
        rows = []
        for obs in trace.get("observations") or []:
            row = _renamed(obs)
            row.setdefault("trace_id", trace["id"])
            for key, value in context.items():
                if row.get(key) is None:
                    row[key] = value
            rows.append(langfuse.observation_rows(row, FORMAT, source, item.line))
        scores = [
            langfuse.score_rows({"trace_id": trace["id"], **_renamed(s)}, FORMAT, source, item.line)
            for s in trace.get("scores") or []
        ]
        for call, span, fragment in rows:
            if call is not None:
                out.calls.append(call)
            out.spans.append(span)
            if fragment is not None:
                out.fragments.append(fragment)
        for span, fragment in scores:
            out.spans.append(span)
            out.fragments.append(fragment)

    each_record(json_records(data, lines=lines), out, handle)
    return out


def looks_like(record: Any) -> bool:
    return isinstance(record, dict) and "observations" in record and "id" in record
