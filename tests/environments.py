"""Settings for running the pipeline against tmp folders or the loopback S3
server, and a way to run a stage job in-process with them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import boto3
import dagster as dg

from pipelines.resources.warehouse import Warehouse
from pipelines.settings import Settings


@dataclasses.dataclass(frozen=True)
class S3:
    """A bucket on the loopback S3 server."""

    endpoint_url: str
    bucket: str

    def uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"

    def client(self):
        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1")

    def warehouse(self, prefix: str = "wh") -> Warehouse:
        return Warehouse(
            uri=self.uri(prefix),
            endpoint_url=self.endpoint_url,
            region="us-east-1",
            access_key_id="testing",
            secret_access_key="testing",
        )

    def objects(self, prefix: str) -> dict[str, bytes]:
        """Every object under ``prefix``: key -> bytes."""
        client = self.client()
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
        return {k: client.get_object(Bucket=self.bucket, Key=k)["Body"].read() for k in keys}

    def download(self, prefix: str, folder: Path) -> Path:
        """Every object under ``prefix``, as files under ``folder`` (to look inside them)."""
        for key, data in self.objects(prefix).items():
            (folder / key).parent.mkdir(parents=True, exist_ok=True)
            (folder / key).write_bytes(data)
        return folder


def local_settings(tmp_path, **changes) -> Settings:
    base = Settings.from_env()
    fields = dict(
        source_uri=str(tmp_path / "source"),
        warehouse_uri=str(tmp_path / "warehouse"),
        stores_uri=str(tmp_path / "stores"),
        endpoint_url=None,
    )
    fields.update(changes)
    return dataclasses.replace(base, **fields)


def s3_settings(s3: S3, **changes) -> Settings:
    base = Settings.from_env()
    fields = dict(
        source_uri=s3.uri("raw"),
        warehouse_uri=s3.uri("warehouse"),
        stores_uri=s3.uri("stores"),
        endpoint_url=s3.endpoint_url,
        region="us-east-1",
        access_key_id="testing",
        secret_access_key="testing",
    )
    fields.update(changes)
    return dataclasses.replace(base, **fields)


def run_stage(settings: Settings, stage: str, day: str, instance: dg.DagsterInstance | None = None, **kwargs):
    """Run a stage job in-process for one day with the resources ``settings`` builds."""
    from pipelines.definitions import build

    job = build(settings).resolve_job_def(stage)
    return job.execute_in_process(partition_key=day, instance=instance or dg.DagsterInstance.ephemeral(), **kwargs)
