"""The warehouse as a Dagster resource: ``pipelines.warehouse.WarehouseOps`` with its
settings as resource config (AWS keys reach it as environment references)."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from pipelines.delta import MergeResult, OldLayout, to_arrow
from pipelines.warehouse import WarehouseOps

__all__ = ["MergeResult", "OldLayout", "Warehouse", "to_arrow"]


class Warehouse(WarehouseOps, dg.ConfigurableResource):
    """A folder or S3 prefix holding one Delta table per tracelake table."""

    uri: str = Field(description="s3://bucket/prefix or a local folder")
    endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint (AWS_ENDPOINT_URL)")
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    max_commit_attempts: int = 8
    max_read_attempts: int = 3
