"""A local folder source is fingerprinted by content (MD5, as S3's etag of a single-part
object), not file times: the demo's folder copied elsewhere (every file time new) and
ingested again reads 0 objects; a file whose bytes change is read again."""

from __future__ import annotations

import dataclasses
import os
import shutil
from datetime import date

import dagster as dg

from pipelines.demo import generate
from tests.environments import local_settings, run_stage

DAY = date(2026, 11, 20)


def ingest_counts(settings, instance) -> dict[str, int]:
    result = run_stage(settings, "ingest", DAY.isoformat(), instance)
    assert result.success
    meta = next(m for m in result.asset_materializations_for_node("raw_traces") if m.asset_key.path == ["calls"])
    return {k: meta.metadata[k].value for k in ("objects_listed", "objects_skipped_unchanged", "objects_ingested")}


def test_reingesting_a_copied_demo_folder_reads_no_object(tmp_path):
    settings = local_settings(tmp_path)
    generate(settings.source_uri, calls=20, days=1, seed=3, end=DAY, stores_out=settings.stores_uri)
    instance = dg.DagsterInstance.ephemeral()
    first = ingest_counts(settings, instance)
    assert first["objects_ingested"] == first["objects_listed"] > 0

    copied = tmp_path / "copied"
    shutil.copytree(settings.source_uri, copied, copy_function=shutil.copyfile)  # new file times, same bytes
    later = os.stat(settings.source_uri).st_mtime_ns + 10**9
    for path in copied.rglob("*"):
        os.utime(path, ns=(later, later))
    moved = dataclasses.replace(settings, source_uri=str(copied))
    again = ingest_counts(moved, instance)
    assert again == {**first, "objects_skipped_unchanged": first["objects_listed"], "objects_ingested": 0}

    changed = sorted(p for p in copied.rglob("*") if p.is_file())[0]
    changed.write_bytes(changed.read_bytes() + b"\n")  # the same key, other bytes
    assert ingest_counts(moved, instance)["objects_ingested"] == 1
