"""Settings, the ingest job and an S3 bucket for the retention tests."""

from __future__ import annotations

import dataclasses
from datetime import date, timedelta
from pathlib import Path

import boto3
import dagster as dg

from pipelines.resources.warehouse import Warehouse
from pipelines.settings import Settings

# The demo data every retention test reads: three days, the middle one with the planted traces.
END = date(2026, 11, 20)
DAYS = [END - timedelta(days=2), END - timedelta(days=1), END]
CALLS_PER_DAY = 600


def settings_for(source: str, warehouse: str, **changes) -> Settings:
    fields = {"source_uri": source, "warehouse_uri": warehouse, "endpoint_url": None, **changes}
    return dataclasses.replace(Settings.from_env(), **fields)


def ingest(settings: Settings, days: list[date]) -> None:
    """The real ingest job, in-process, day by day."""
    from pipelines.definitions import build

    job = build(settings).resolve_job_def("ingest")
    instance = dg.DagsterInstance.ephemeral()
    for day in days:
        assert job.execute_in_process(partition_key=day.isoformat(), instance=instance).success


@dataclasses.dataclass(frozen=True)
class S3:
    endpoint_url: str
    bucket: str

    def client(self):
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def warehouse(self, prefix: str = "wh") -> Warehouse:
        return Warehouse(
            uri=f"s3://{self.bucket}/{prefix}",
            endpoint_url=self.endpoint_url,
            region="us-east-1",
            access_key_id="testing",
            secret_access_key="testing",
        )

    def objects(self, prefix: str) -> dict[str, bytes]:
        client = self.client()
        keys = [
            o["Key"]
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
            for o in page.get("Contents", [])
        ]
        return {k: client.get_object(Bucket=self.bucket, Key=k)["Body"].read() for k in keys}

    def download(self, prefix: str, folder: Path) -> Path:
        """Every object under ``prefix``, as files under ``folder`` (to look inside them)."""
        for key, data in self.objects(prefix).items():
            (folder / key).parent.mkdir(parents=True, exist_ok=True)
            (folder / key).write_bytes(data)
        return folder
