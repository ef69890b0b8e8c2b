"""The pre-write screen: redacted rows that still hold PII are quarantined, not written.

Ingest runs the residual-PII scan (``residual.row_residuals``) over every
redacted `calls` and `spans` row before any merge (the redactor runs it as it
makes the rows: ``Redactor.redact_rows(screen=patterns)``). A row where a pattern
class still matches (an email, a valid CPF or card, an API key) is dropped
and replaced by a `quarantine` row that points at it: object, line, table
and the pattern class, never the value. The blocking residual asset checks
stay as the second line, over what was written.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pipelines.ingest.objects import LOG_BOOKKEEPING
from pipelines.record.canonical import record_sha256, sha256_hex
from pipelines.redact.policy import Policy
from pipelines.redact.residual import PATTERNS, row_residuals

if TYPE_CHECKING:
    from pipelines.redact.redactor import RedactionResult

ERROR_CLASS = "residual_pii"
ROW_KEYS = {"calls": "call_id", "spans": "span_key"}


@dataclass
class Screened:
    calls: list[dict[str, Any]]
    spans: list[dict[str, Any]]
    quarantine: list[dict[str, Any]] = field(default_factory=list)
    # the call ids and span keys held back (their audit rows go too)
    held: set[str] = field(default_factory=set)

    def lines_by_uri(self) -> dict[str, set[Any]]:
        """Source object uri -> the lines (records) that lost a row."""
        lines: dict[str, set[Any]] = defaultdict(set)
        for row in self.quarantine:
            lines[row["source_uri"]].add(row["line"])
        return dict(lines)


def screen_rows(
    calls: Sequence[dict[str, Any]],
    spans: Sequence[dict[str, Any]],
    policy: Policy,
    *,
    keys_by_uri: Mapping[str, str],
    run_id: str,
    now: datetime,
    patterns: Sequence[str] = PATTERNS,
    found: RedactionResult | None = None,
) -> Screened:
    """Split redacted rows into the ones to write and quarantine pointers for the rest.
    ``keys_by_uri`` maps a row's ``source_uri`` to its object key. ``found``: the
    redaction that made these rows, when it scanned them already
    (``Redactor.redact_rows(screen=patterns)``, the same patterns); else they are scanned here."""
    out = Screened([], [])
    screened = found is not None and found.residuals is not None and found.screened == tuple(patterns)
    for table, rows, kept in (("calls", calls, out.calls), ("spans", spans, out.spans)):
        classes = found.residuals[table] if screened else row_residuals(rows, table, policy, patterns)
        for row, found_in_row in zip(rows, classes, strict=True):
            # a span of a held call goes with it (a span row never points at a missing call)
            if not found_in_row and not (table == "spans" and row.get("call_id") in out.held):
                kept.append(row)
                continue
            out.held.add(row[ROW_KEYS[table]])
            out.quarantine.append(_pointer(table, row, found_in_row, keys_by_uri, run_id, now))
    return out


def _pointer(
    table: str,
    row: Mapping[str, Any],
    found: tuple[str, ...],
    keys_by_uri: Mapping[str, str],
    run_id: str,
    now: datetime,
) -> dict[str, Any]:
    uri, line = row.get("source_uri"), row.get("source_line")
    key = keys_by_uri.get(uri or "", uri)
    where = f"line {line}" if line is not None else "the object"
    return {
        "quarantine_id": sha256_hex(
            f"{key}|{row.get('source_etag')}|{line}|{ERROR_CLASS}|{table}|{row[ROW_KEYS[table]]}"
        ),
        "source_key": key,
        "source_uri": uri,
        "etag": row.get("source_etag"),
        "line": line,
        "byte_offset": None,
        "scope": "record",
        "source_format": row.get("source_format"),
        "error_class": ERROR_CLASS,
        "message": (
            f"a {table} row from {where} still matched the {', '.join(found)} pattern after redaction, so it was "
            "not written; add a field rule or recognizer to the redaction policy, then re-ingest the object"
            if found
            else f"a {table} row from {where} belongs to a call held back for residual PII (quarantined with it)"
        ),
        "run_id": run_id,
        "ingested_at": now,
        "ingested_date": now.date(),
    }


def account(ingest_log: Sequence[dict[str, Any]], screened: Screened) -> list[dict[str, Any]]:
    """Ingest-log rows with the held-back records counted as quarantined, so that
    records_read == records_ingested + records_quarantined still holds."""
    lines = screened.lines_by_uri()
    out = []
    for row in ingest_log:
        held = min(len(lines.get(row.get("source_uri") or "", ())), row.get("records_ingested") or 0)
        if held:
            row = {**row, "records_ingested": row["records_ingested"] - held}
            row["records_quarantined"] = (row.get("records_quarantined") or 0) + held
            if row.get("status") == "ok":
                row["status"] = "partial"
            row["record_sha256"] = record_sha256(row, LOG_BOOKKEEPING)
        out.append(row)
    return out
