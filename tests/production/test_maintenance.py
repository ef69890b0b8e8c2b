"""Table maintenance on real Delta tables (a folder and moto's S3 server): compaction and
z-order shrink the file count without changing a row, time travel inside the window
survives, a re-run commits nothing, and the scheduled job reports files and bytes."""

from datetime import UTC, date, datetime

import dagster as dg
import pytest
from deltalake import DeltaTable, write_deltalake

from assets.maintenance import maintenance, maintenance_schedule
from pipelines.delta import WRITER_PROPERTIES, to_arrow
from pipelines.maintenance import maintain, table_files
from pipelines.record.schema import PARTITIONS
from pipelines.resources.warehouse import Warehouse

DAY = date(2026, 11, 29)


def _spans(batch: int, n: int = 20) -> list[dict]:
    at = datetime(2026, 11, 29, 12, tzinfo=UTC)
    return [
        {
            "span_key": f"s{batch}-{i}",
            "trace_id": f"t{(batch * n + i) % 7}",
            "span_id": f"{batch}-{i}",
            "kind": "tool" if i % 3 else "llm_call",
            "occurred_at": at,
            "occurred_date": DAY if i % 4 else date(2026, 11, 28),
            "record_sha256": f"h{batch}-{i}",
        }
        for i in range(n)
    ]


def _fragmented(warehouse: Warehouse, appends: int = 6) -> None:
    """A table with many small files per partition. tracelake's own writes rewrite each
    partition they touch into one file; another engine's appends (Spark, a backfill script)
    leave a file each."""
    warehouse.merge("spans", _spans(0))
    for batch in range(1, appends):
        write_deltalake(
            warehouse.table("spans"),
            to_arrow("spans", _spans(batch)),
            mode="append",
            partition_by=list(PARTITIONS["spans"]),
            writer_properties=WRITER_PROPERTIES,
        )


def _rows(table: DeltaTable) -> list[tuple]:
    return sorted(table.to_pyarrow_table(columns=["span_key", "trace_id", "record_sha256"]).to_pylist(), key=str)


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_maintenance_compacts_zorders_and_keeps_time_travel(kind, tmp_path, request):
    warehouse = Warehouse(uri=str(tmp_path / "wh")) if kind == "local" else request.getfixturevalue("s3").warehouse()
    _fragmented(warehouse)
    before = warehouse.table("spans")
    rows, old_version = _rows(before), 2
    old_rows = _rows(
        DeltaTable(warehouse.table_uri("spans"), version=old_version, storage_options=warehouse.storage_options())
    )

    report = maintain(warehouse, "spans", [DAY], retention_days=7)

    assert report.before.files >= 12 and report.after.files < report.before.files
    assert report.files_compacted > 0 and report.zordered_partitions == (DAY.isoformat(),)
    assert report.files_vacuumed == 0, "files replaced just now are inside the 7-day window"
    after = warehouse.table("spans")
    assert _rows(after) == rows, "maintenance moves rows between files, never changes them"
    # time travel inside the window still reads the old version, from files that are no longer current
    travelled = DeltaTable(
        warehouse.table_uri("spans"), version=old_version, storage_options=warehouse.storage_options()
    )
    assert _rows(travelled) == old_rows
    assert after.metadata().configuration["delta.logRetentionDuration"] == "interval 7 days"

    again = maintain(warehouse, "spans", [DAY], retention_days=7)
    assert again.version_after == again.version_before == report.version_after, "a re-run commits nothing"
    assert again.zordered_partitions == () and again.files_compacted == 0


def test_zero_day_window_removes_replaced_files_and_old_versions(tmp_path):
    warehouse = Warehouse(uri=str(tmp_path / "wh"))
    _fragmented(warehouse)
    rows = _rows(warehouse.table("spans"))
    report = maintain(warehouse, "spans", [DAY], retention_days=0)
    assert report.files_vacuumed >= report.before.files - report.after.files > 0
    on_disk = {p.name for p in (tmp_path / "wh" / "spans").rglob("*.parquet") if "_delta_log" not in p.parts}
    assert len(on_disk) == report.after.files, "only the current files remain"
    assert _rows(warehouse.table("spans")) == rows
    with pytest.raises(Exception):  # noqa: B017  (delta-rs raises a generic error for a missing file)
        DeltaTable(warehouse.table_uri("spans"), version=1).to_pyarrow_table()


def test_the_scheduled_job_reports_files_and_bytes_before_and_after(tmp_path):
    warehouse = Warehouse(uri=str(tmp_path / "wh"))
    _fragmented(warehouse)
    files_before = table_files(warehouse.table("spans")).files
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(instance=instance, scheduled_execution_time=datetime(2026, 11, 30, 6, 30))
        request = maintenance_schedule(context)
        result = maintenance.execute_in_process(
            run_config=request.run_config, resources={"warehouse": warehouse}, instance=instance
        )
    assert result.success
    observed = {
        e.asset_observation_data.asset_observation.asset_key.path[
            -1
        ]: e.asset_observation_data.asset_observation.metadata
        for e in result.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    }
    assert set(observed) == {"spans"}, "only tables that exist are maintained"
    meta = observed["spans"]
    assert meta["files_before"].value == files_before
    assert meta["files_after"].value == table_files(warehouse.table("spans")).files < files_before
    assert meta["bytes_before"].value > 0 and meta["bytes_after"].value > 0
    assert meta["zordered_partitions"].value == "2026-11-29"
