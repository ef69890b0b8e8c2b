"""Erasure: every row of one user out of every table, and out of the files.

The raw user id is first mapped to its stored form (``redact.stored_id``: an
email or phone used as the id was pseudonymized at ingest). The user's calls,
traces and sessions are found through ``user_id`` in every
table that has it; then every table in ``schema.TABLES`` loses the rows with
that user id or one of those call, trace or session ids (so `retention`,
audit and check tables keyed by call id go too). Each table that lost rows is
vacuumed: the rewritten files, and the log history whose statistics and
delete predicates could still quote the user, are removed from storage.

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import polars as pl

from pipelines.record.schema import TABLES
from pipelines.record.stored import DERIVED_KEY, FROM_CALL, SOURCE_KEY_OF, STORED_CALL_ID
from pipelines.redact.identifiers import stored_id
from pipelines.redact.keys import KeyRing

if TYPE_CHECKING:
    from pipelines.resources.warehouse import Warehouse

LOG_TABLE = "erasure_log"
HASH_SCHEME = "hmac-sha256"
LINKS = ("call_id", "trace_id", "session_id")
MIN_KEY_BYTES = 16
# ids per delete predicate: large enough for most users, small enough for the SQL parser
CHUNK = 500


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


def _tables() -> list[str]:
    return [name for name, schema in TABLES.items() if name != LOG_TABLE and _linked(schema.names)]


def _linked(columns: list[str]) -> bool:
    return "user_id" in columns or any(c in columns for c in LINKS)


def find_links(warehouse: Warehouse, user_id: str) -> dict[str, set[str]]:
    """The call, trace and session ids of the user's rows, in every table with a user_id."""
    links: dict[str, set[str]] = {c: set() for c in LINKS}
    for name, schema in TABLES.items():
        if "user_id" not in schema.names:
            continue
        columns = [c for c in LINKS if c in schema.names]
        rows = warehouse.read(name, pl.col("user_id") == user_id, columns)
        for column in columns:
            links[column] |= set(rows[column].drop_nulls().to_list())
    return links


def _matching(columns: list[str], user_id: str, links: dict[str, set[str]]) -> Iterator[pl.Expr]:
    if "user_id" in columns:
        yield pl.col("user_id") == user_id
    for column in LINKS:
        if column in columns and links[column]:
            yield pl.col(column).is_in(sorted(links[column]))


def _predicates(columns: list[str], user_id: str, links: dict[str, set[str]]) -> Iterator[str]:
    """SQL predicates that together select the user's rows, in chunks of ids."""
    if "user_id" in columns:
        yield f"user_id = {_quoted(user_id)}"
    for column in LINKS:
        values = sorted(links[column]) if column in columns else []
        # `calls` and `spans` store a derived key as null and `spans` a call's own span's call
        # id as "=": those rows are deleted by the columns the key is derived from (``_by_source_key``)
        for start in range(0, len(values), CHUNK):
            chunk = ", ".join(_quoted(v) for v in values[start : start + CHUNK])
            yield f"{column} IN ({chunk})"


def _by_source_key(warehouse: Warehouse, name: str, links: dict[str, set[str]]) -> list[str]:
    """Predicates on the stored ``name`` (`calls` or `spans`) that select its rows linked to the
    user's calls by ``call_id`` as read: the files hold no call id (`calls`) or span key
    (`spans`) that is derived, and a call's own span stores its call id as "="."""
    if not links["call_id"]:
        return []
    found = (
        warehouse.scan(name)
        .filter(pl.col("call_id").is_in(sorted(links["call_id"])))
        .select(SOURCE_KEY_OF)
        .unique()
        .collect()
    )
    rows = [
        " AND ".join(f"{c} = {_quoted(v)}" for c, v in zip(SOURCE_KEY_OF, row, strict=True)) for row in found.rows()
    ]
    return [" OR ".join(f"({r})" for r in rows[i : i + CHUNK]) for i in range(0, len(rows), CHUNK)]


# Tables whose files leave out the trace id their call says and may name it by a prefix of
# its id (record/stored.py), with the column their rows are deleted by
STORED_APART = dict.fromkeys(FROM_CALL, "call_id")


def _delete_predicates(warehouse: Warehouse, name: str, user_id: str, links: dict[str, set[str]]) -> list[str]:
    """SQL predicates that delete the user's rows of ``name``; none when it holds none. A table
    in ``STORED_APART`` is matched as read, with its links back, and deleted by its key: a
    predicate on a stored link would miss, say, the retention row of another user's call in
    the user's trace, which the trace id links."""
    if rows_of_user(warehouse, name, user_id, links) == 0:
        return []
    columns = TABLES[name].names
    if name in DERIVED_KEY:
        return [*_predicates(columns, user_id, links), *_by_source_key(warehouse, name, links)]
    if name not in STORED_APART:
        return list(_predicates(columns, user_id, links))
    key = STORED_APART[name]
    # by the call id as stored: a prefix where it names the call alone (record/stored.py short_call_ids)
    matched = warehouse.scan(name, keep_stored_call_id=True).filter(
        pl.any_horizontal(list(_matching(columns, user_id, links)))
    )
    ids = sorted(matched.select(pl.col(STORED_CALL_ID).unique()).collect()[STORED_CALL_ID].drop_nulls().to_list())
    return [f"{key} IN ({', '.join(_quoted(v) for v in ids[i : i + CHUNK])})" for i in range(0, len(ids), CHUNK)]


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def rows_of_user(warehouse: Warehouse, name: str, user_id: str, links: dict[str, set[str]]) -> int:
    conditions = list(_matching(TABLES[name].names, user_id, links))
    if not conditions:
        return 0
    return warehouse.scan(name).filter(pl.any_horizontal(conditions)).select(pl.len()).collect().item()


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
    links = find_links(warehouse, user_id)
    # every table's rows are found before any table loses rows: some are found through `calls`
    plans = {name: _delete_predicates(warehouse, name, user_id, links) for name in _tables()}
    for name, predicates in plans.items():
        # no delete where nothing matches: even an empty delete would write its predicate to the log
        if not predicates:
            continue
        report.rows_deleted[name] = sum(warehouse.delete(name, p) for p in predicates)
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
