"""Partitions: every stage is daily (UTC). Today is a partition too, so the
sensor can ingest objects as they land; the nightly schedule targets yesterday.
The first day is ``TRACELAKE_START_DATE`` (settings.start_date): by default the
first day a ``tracelake demo`` fills."""

from __future__ import annotations

from datetime import date

import dagster as dg

from pipelines.settings import start_date

START_DATE = start_date()

daily = dg.DailyPartitionsDefinition(start_date=START_DATE, timezone="UTC", end_offset=1)


def day_of(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext) -> date:
    """The partition's day."""
    return date.fromisoformat(context.partition_key)
