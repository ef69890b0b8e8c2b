"""Erasure: every row of one user out of every table, and out of the files.

The raw user id is first mapped to its stored form (``redact.stored_id``: an
email or phone used as the id was pseudonymized at ingest). The user's calls,
traces and sessions are found through ``user_id`` in every
table that has it (and the calls of those traces and sessions); then every
table in ``schema.TABLES`` loses the rows with that user id or one of those
call, trace or session ids, through every column that references a call
(``ablations.bad_call_id`` too). Each table that lost rows is vacuumed: the
rewritten files, and the log history whose statistics could still quote the
user, are removed from storage. The counts in `erasure_log` are the rows each
table lost.

The audit row in `erasure_log` holds a keyed hash of the user id (HMAC-SHA256
under the operator's erasure key), never the id: someone holding the key can
answer "was this user erased, and when?"; nobody else can enumerate ids
against the log. No message here names the user.

tracelake never writes to the raw source, so the user's raw objects there
must be erased by whoever owns that bucket; until they are, re-ingesting a
changed object would bring rows back.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import polars as pl

from pipelines.record.schema import SPECS, TABLES
from pipelines.redact.identifiers import stored_id
from pipelines.redact.keys import KeyRing

if TYPE_CHECKING:
    from pipelines.resources.warehouse import Warehouse

LOG_TABLE = "erasure_log"
HASH_SCHEME = "hmac-sha256"
LINKS = ("call_id", "trace_id", "session_id")
MIN_KEY_BYTES = 16


class ErasureError(ValueError):
    """An erasure request that cannot be carried out as given."""


@dataclass
class ErasureReport:
    erasure_id: str
    subject_hash: str
    rows_deleted: dict[str, int] = field(default_factory=dict)
    files_removed: int = 0
    rows_remaining: int = 0

    @property
    def total_rows_deleted(self) -> int:
        return sum(self.rows_deleted.values())


def subject_hash(user_id: str, key: bytes) -> str:
    return hmac.new(key, user_id.encode("utf-8"), hashlib.sha256).hexdigest()


def link_columns(name: str) -> dict[str, str]:
    """The columns of ``name`` that link a row to a call, trace or session: {column: link}
    (a column that references `calls` links by call id, whatever its name)."""
    columns = TABLES[name].names
    links = {column: column for column in LINKS if column in columns}
    links.update({column: "call_id" for column, target in SPECS[name].references.items() if target == "calls"})
    return links


def _tables() -> list[str]:
    return [name for name in TABLES if name != LOG_TABLE and ("user_id" in TABLES[name].names or link_columns(name))]


def find_links(warehouse: Warehouse, user_id: str) -> dict[str, set[str]]:
    """The call, trace and session ids of the user: of every row with their user_id, and
    every call of their traces and sessions (a call the application logged without a user
    id, or a tool-using agent's call, still belongs to the user's trace)."""
    links: dict[str, set[str]] = {c: set() for c in LINKS}
    for name, schema in TABLES.items():
        if "user_id" not in schema.names:
            continue
        columns = [c for c in LINKS if c in schema.names]
        rows = warehouse.read(name, pl.col("user_id") == user_id, columns)
        for column in columns:
            links[column] |= set(rows[column].drop_nulls().to_list())
    in_traces = pl.col("trace_id").is_in(sorted(links["trace_id"])) | pl.col("session_id").is_in(
        sorted(links["session_id"])
    )
    links["call_id"] |= set(warehouse.read("calls", in_traces, ["call_id"])["call_id"].to_list())
    return links


def user_rows(name: str, user_id: str, links: dict[str, set[str]]) -> pl.Expr | None:
    """The rows of ``name`` that belong to the user; None when the table cannot hold any."""
    conditions = [pl.col("user_id") == user_id] if "user_id" in TABLES[name].names else []
    for column, link in link_columns(name).items():
        if links[link]:
            conditions.append(pl.col(column).is_in(sorted(links[link])))
    return pl.any_horizontal(conditions) if conditions else None


def rows_of_user(warehouse: Warehouse, name: str, user_id: str, links: dict[str, set[str]]) -> int:
    where = user_rows(name, user_id, links)
    if where is None:
        return 0
    return warehouse.scan(name).filter(where).select(pl.len()).collect().item()


def forget_user(
    warehouse: Warehouse,
    user_id: str,
    *,
    key: bytes,
    requested_by: str,
    now: datetime,
    orphan_grace_hours: int = 1,
    keys: KeyRing | None = None,
) -> ErasureReport:
    """Delete every row of ``user_id`` (the raw id, as the application knows it) in
    every table, vacuum, and log the erasure. ``keys`` (default: from the
    environment) map a personal id to its stored pseudonym (``stored_id``)."""
    if not user_id or not user_id.strip():
        raise ErasureError("no user id given: pass the id as the application knows it (an email is fine)")
    if len(key) < MIN_KEY_BYTES:
        raise ErasureError(
            f"the erasure key must be at least {MIN_KEY_BYTES} bytes; generate one once (for example "
            "`python -c 'import secrets; print(secrets.token_hex(32))'`), keep it secret, and use it for every erasure"
        )
    if not requested_by.strip() or user_id in requested_by:
        raise ErasureError(
            "requested_by must say who asked (a ticket or request reference) and must not contain the user id"
        )
    digest = subject_hash(user_id, key)
    # the id as stored: a personal one (an email) was pseudonymized at ingest
    user_id = stored_id(user_id, keys or KeyRing.from_env())
    report = ErasureReport(
        erasure_id=hashlib.sha256(f"{digest}|{now.isoformat()}".encode()).hexdigest(), subject_hash=digest
    )
    # every link is found before any table loses rows: some are found through `calls`
    links = find_links(warehouse, user_id)
    for name in _tables():
        where = user_rows(name, user_id, links)
        # a table with none of the user's rows is not touched (nothing is committed)
        deleted = 0 if where is None else warehouse.delete(name, where)
        if deleted:
            report.rows_deleted[name] = deleted
            report.files_removed += warehouse.vacuum(name, orphan_grace_hours=orphan_grace_hours)
    report.rows_remaining = sum(rows_of_user(warehouse, name, user_id, links) for name in _tables())
    warehouse.merge(LOG_TABLE, [log_row(report, requested_by, now)])
    return report


def log_row(report: ErasureReport, requested_by: str, requested_at: datetime) -> dict:
    return {
        "erasure_id": report.erasure_id,
        "subject_hash": report.subject_hash,
        "hash_scheme": HASH_SCHEME,
        "requested_by": requested_by,
        "requested_at": requested_at,
        "completed_at": datetime.now(UTC),
        "rows_deleted": [{"table": t, "rows": n} for t, n in sorted(report.rows_deleted.items())],
        "total_rows_deleted": report.total_rows_deleted,
        "files_removed": report.files_removed,
        "rows_remaining": report.rows_remaining,
    }
