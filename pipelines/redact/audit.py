"""`redaction_audit` rows: what was redacted in a call, by type, and with what.

Counts, field paths and versions only; never a value. ``entity_counts`` counts
distinct values per type (an email quoted in three columns is one email);
``replacements`` counts every place a value was replaced.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

from pipelines.record.canonical import record_sha256

# redacted_at changes on every run; a re-run that redacts the same way rewrites nothing
AUDIT_BOOKKEEPING = ("redacted_at", "record_sha256")


# JSON keys are data too ({"maria@x.com": ...}): a path segment that is not a
# plain identifier is written as "*"
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]{0,63}")


@lru_cache(maxsize=8192)  # called per replacement; a day has few distinct paths
def safe_path(path: str) -> str:
    return ".".join(part if _IDENTIFIER.fullmatch(part) else "*" for part in path.split("."))


@dataclass
class RecordTally:
    """What was replaced in one row, as it happens."""

    values: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    replacements: int = 0
    fields: set[str] = field(default_factory=set)

    def add(self, entity: str, normalized: str, path: str) -> None:
        self.values[entity].add(normalized)
        self.replacements += 1
        self.fields.add(safe_path(path))

    def entity_counts(self) -> dict[str, int]:
        return {entity: len(values) for entity, values in sorted(self.values.items())}


@dataclass(frozen=True)
class AuditContext:
    mode: str
    policy_name: str
    policy_version: str
    policy_sha256: str
    detector_versions: dict[str, str]
    encryption_key_id: str | None
    hash_key_id: str
    redacted_at: datetime


def audit_row(
    context: AuditContext,
    record_id: str,
    source_table: str,
    row: dict[str, Any],
    tally: RecordTally,
    flags: list[str],
) -> dict[str, Any]:
    audit = {
        # a call's row is keyed by its llm_call span, whose key is the call id
        "span_key": record_id,
        "call_id": record_id if source_table == "calls" else None,
        "source_table": source_table,
        "trace_id": row.get("trace_id"),
        "occurred_date": row.get("occurred_date"),
        "mode": context.mode,
        "policy_name": context.policy_name,
        "policy_version": context.policy_version,
        "policy_sha256": context.policy_sha256,
        "detector_versions": dict(context.detector_versions),
        "entity_counts": tally.entity_counts(),
        "replacements": tally.replacements,
        "fields": sorted(tally.fields),
        "encryption_key_id": context.encryption_key_id,
        "hash_key_id": context.hash_key_id,
        "flags": flags,
        "redacted_at": context.redacted_at,
    }
    audit["record_sha256"] = record_sha256(audit, AUDIT_BOOKKEEPING)
    return audit
