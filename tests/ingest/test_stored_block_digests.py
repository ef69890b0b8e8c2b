"""Block hashes are stored as their first 16 hex digits (``canonical.BLOCK_DIGEST_CHARS``)
and compared by them; a warehouse written before, with all 64, reads back the same and
gives the same rot verdicts."""

from __future__ import annotations

from datetime import date

import dagster as dg
import polars as pl

from assets.rot import rot_checks
from pipelines.demo import generate
from pipelines.record import canonical, stored
from tests.environments import local_settings, run_stage

DAY = date(2026, 11, 20)
VERDICT = ("status", "components", "rotted_blocks", "basis", "missing")


def test_block_digests_compare_by_their_first_digits():
    full = canonical.sha256_hex(canonical.canonical_json({"role": "user", "content": "hi"}))
    assert len(full) == 64 and canonical.block_digest(full) == full[: canonical.BLOCK_DIGEST_CHARS]
    assert canonical.same_block_digest(full, full[:16]) and canonical.same_block_digest(full[:16], full)
    other = canonical.sha256_hex(canonical.canonical_json({"role": "user", "content": "ho"}))
    assert not canonical.same_block_digest(full, other[:16])
    assert not canonical.same_block_digest(None, full) and not canonical.same_block_digest(full, None)


def _stored_digest_lengths(settings) -> set[int]:
    raw = pl.read_delta(settings.warehouse().table_uri("calls")).select(
        pl.col("block_hashes").list.eval(pl.element().struct.field("sha256").str.len_chars()).explode()
    )
    return set(raw.to_series().drop_nulls().to_list())


def _day(tmp_path, instance: dg.DagsterInstance) -> tuple[dict, dict, set[int]]:
    """(call_id -> block hashes read back, call_id -> rot verdict) of the demo day."""
    settings = local_settings(tmp_path)
    generate(settings.source_uri, calls=120, days=1, seed=11, end=DAY, stores_out=settings.stores_uri)
    assert run_stage(settings, "ingest", DAY.isoformat(), instance).success
    result = dg.materialize(
        [rot_checks], resources=settings.resources(), partition_key=DAY.isoformat(), instance=instance
    )
    assert result.success
    warehouse = settings.warehouse()
    blocks = {c["call_id"]: c["block_hashes"] for c in warehouse.read("calls").to_dicts()}
    verdicts = {r["call_id"]: {k: r[k] for k in VERDICT} for r in warehouse.read("rot_checks").to_dicts()}
    return blocks, verdicts, _stored_digest_lengths(settings)


def test_a_table_written_with_64_digit_block_hashes_reads_and_checks_the_same(tmp_path, monkeypatch):
    with dg.instance_for_test() as instance:
        blocks, verdicts, lengths = _day(tmp_path / "now", instance)
    assert lengths == {canonical.BLOCK_DIGEST_CHARS}

    # the layout before: every block hash stored in full
    monkeypatch.setattr(stored, "stored_block_hashes", lambda calls: calls)
    with dg.instance_for_test() as instance:
        old_blocks, old_verdicts, old_lengths = _day(tmp_path / "before", instance)
    assert old_lengths == {64}

    # read back, both hold the same 16 digits, and the check concludes the same of every call
    assert old_blocks == blocks
    assert all(len(b["sha256"]) == canonical.BLOCK_DIGEST_CHARS for bs in blocks.values() for b in bs or [])
    assert old_verdicts == verdicts
    statuses = {v["status"] for v in verdicts.values()}
    assert {"rotted", "verified"} <= statuses, statuses
