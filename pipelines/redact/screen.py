"""The pre-write screen: rows that still hold PII are quarantined, not written.

Ingest runs the residual-PII scan (``residual.scan``) over the Arrow tables it is
about to write, after redaction and apart from it: `calls`, `spans`,
`redaction_audit` and `quarantine`. A `calls` or `spans` row where a pattern class
still matches (an email, a valid CPF or card, an API key), or whose audit row does,
is dropped with its audit row and the spans of its call, and replaced by a
`quarantine` row that points at it: object, line, table and the pattern class,
never the value. A quarantine row whose message matches keeps its pointer and
loses the message. The blocking residual asset checks run the same scan over what
was written.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from pipelines.ingest.objects import LOG_BOOKKEEPING
from pipelines.record.canonical import record_sha256, sha256_hex
from pipelines.redact.policy import Policy
from pipelines.redact.residual import PATTERNS, classes, scan

ERROR_CLASS = "residual_pii"
ROW_KEYS = {"calls": "call_id", "spans": "span_key"}
# what a pointer names of the row it stands for
_POINTED = ["source_uri", "source_line", "source_etag", "source_format"]


@dataclass
class Screened:
    # the tables to write: calls, spans, redaction_audit, and quarantine with the pointers below
    tables: dict[str, pa.Table]
    # the pointers to the rows held back
    quarantine: list[dict[str, Any]] = field(default_factory=list)
    # per table (calls, spans), the keys of the rows held back (their audit rows go too)
    held: dict[str, set[str]] = field(default_factory=lambda: {"calls": set(), "spans": set()})

    def lines_by_uri(self) -> dict[str, set[Any]]:
        """Source object uri -> the lines (records) that lost a row."""
        lines: dict[str, set[Any]] = defaultdict(set)
        for row in self.quarantine:
            lines[row["source_uri"]].add(row["line"])
        return dict(lines)


def screen_tables(
    tables: Mapping[str, pa.Table],
    policy: Policy,
    *,
    keys_by_uri: Mapping[str, str],
    run_id: str,
    now: datetime,
    patterns: Sequence[str] = PATTERNS,
) -> Screened:
    """Split the tables ingest is about to write (``calls``, ``spans``, ``redaction_audit``,
    ``quarantine``) into what is written and quarantine pointers for the rest.
    ``keys_by_uri`` maps a row's ``source_uri`` to its object key."""
    found = {name: classes(scan(data, name, policy, patterns), data.num_rows) for name, data in tables.items()}
    # why each call and span is held: (the table that matched, its classes)
    why: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {"calls": {}, "spans": {}}
    audit = tables["redaction_audit"]
    audited = list(zip(audit["source_table"].to_pylist(), audit["span_key"].to_pylist(), strict=True))
    for (source, key), matched in zip(audited, found["redaction_audit"], strict=True):
        if matched:
            why[source][key] = ("redaction_audit", matched)
    for table in ("calls", "spans"):
        for key, matched in zip(tables[table][ROW_KEYS[table]].to_pylist(), found[table], strict=True):
            if matched:
                why[table][key] = (table, matched)
    out = Screened(dict(tables))
    for table in ("calls", "spans"):
        data = tables[table]
        keys = data[ROW_KEYS[table]].to_pylist()
        # a span of a held call goes with it (a span row never points at a missing call)
        held = [
            at
            for at, (key, call) in enumerate(zip(keys, data["call_id"].to_pylist(), strict=True))
            if key in why[table] or (table == "spans" and call in why["calls"])
        ]
        rows = data.select(_POINTED).take(pa.array(held, pa.int64())).to_pylist()
        for at, row in zip(held, rows, strict=True):
            out.held[table].add(keys[at])
            out.quarantine.append(_pointer(table, keys[at], row, why[table].get(keys[at]), keys_by_uri, run_id, now))
        out.tables[table] = _without(data, held)
    kept_audit = [key not in out.held[source] for source, key in audited]
    out.tables["redaction_audit"] = audit.filter(pa.array(kept_audit, pa.bool_()))
    quarantine = tables["quarantine"]
    if any(found["quarantine"]):
        messages = [
            f"the message was withheld: it matched the {', '.join(matched)} pattern" if matched else message
            for message, matched in zip(quarantine["message"].to_pylist(), found["quarantine"], strict=True)
        ]
        at = quarantine.schema.get_field_index("message")
        quarantine = quarantine.set_column(at, quarantine.schema.field(at), pa.array(messages, pa.string()))
    pointers = pa.Table.from_pylist(out.quarantine, schema=quarantine.schema) if out.quarantine else None
    out.tables["quarantine"] = pa.concat_tables([quarantine, pointers]) if pointers is not None else quarantine
    return out


def _without(data: pa.Table, held: list[int]) -> pa.Table:
    if not held:
        return data
    keep = [True] * data.num_rows
    for at in held:
        keep[at] = False
    return data.filter(pa.array(keep, pa.bool_()))


def _pointer(
    table: str,
    key: str,
    row: Mapping[str, Any],
    why: tuple[str, tuple[str, ...]] | None,
    keys_by_uri: Mapping[str, str],
    run_id: str,
    now: datetime,
) -> dict[str, Any]:
    uri, line = row.get("source_uri"), row.get("source_line")
    where = f"line {line}" if line is not None else "the object"
    fix = "add a field rule or recognizer to the redaction policy, then re-ingest the object"
    if why is None:
        message = f"a {table} row from {where} belongs to a call held back for residual PII (quarantined with it)"
    elif why[0] == table:
        message = f"a {table} row from {where} still matched the {', '.join(why[1])} pattern after redaction, so it was not written; {fix}"  # noqa: E501
    else:
        message = f"the {why[0]} row of a {table} row from {where} matched the {', '.join(why[1])} pattern, so neither was written; {fix}"  # noqa: E501
    source_key = keys_by_uri.get(uri or "", uri)
    return {
        "quarantine_id": sha256_hex(f"{source_key}|{row.get('source_etag')}|{line}|{ERROR_CLASS}|{table}|{key}"),
        "source_key": source_key,
        "source_uri": uri,
        "etag": row.get("source_etag"),
        "line": line,
        "byte_offset": None,
        "scope": "record",
        "source_format": row.get("source_format"),
        "error_class": ERROR_CLASS,
        "message": message,
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
