"""Settings and the ingest job for the retention tests."""

from __future__ import annotations

import dataclasses
from datetime import date, timedelta

import dagster as dg

from pipelines.settings import Settings
from tests.environments import S3  # noqa: F401  (re-exported for the retention tests)

# The demo data every retention test reads: three days, the middle one with the planted traces.
END = date(2026, 11, 20)
DAYS = [END - timedelta(days=2), END - timedelta(days=1), END]
CALLS_PER_DAY = 600


def settings_for(source: str, warehouse: str, **changes) -> Settings:
    fields = {"source_uri": source, "warehouse_uri": warehouse, "endpoint_url": None, **changes}
    return dataclasses.replace(Settings.from_env(), **fields)


def ingest(settings: Settings, days: list[date]) -> None:
    """The real ingest, in-process, day by day: the load of every shard, then the ingest job."""
    from tests.environments import run_stage

    instance = dg.DagsterInstance.ephemeral()
    for day in days:
        assert run_stage(settings, "ingest", day.isoformat(), instance).success
