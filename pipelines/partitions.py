"""Partitions: every stage is daily (UTC). Today is a partition too, so the
sensor can ingest objects as they land; the nightly schedule targets yesterday."""

from __future__ import annotations

from datetime import date

import dagster as dg

START_DATE = "2024-01-01"

daily = dg.DailyPartitionsDefinition(start_date=START_DATE, timezone="UTC", end_offset=1)


def day_of(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext) -> date:
    """The partition's day."""
    return date.fromisoformat(context.partition_key)
