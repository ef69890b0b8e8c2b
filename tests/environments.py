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


class DayRuns:
    """The runs of one stage for a day: the load of each shard, then the daily job. Reads as
    one result: success of all, every run's events and materializations; the rest from the last."""

    def __init__(self, results: list):
        self.results = results

    @property
    def success(self) -> bool:
        return all(r.success for r in self.results)

    @property
    def all_events(self) -> list:
        return [e for r in self.results for e in r.all_events]

    def asset_materializations_for_node(self, node: str) -> list:
        return [m for r in self.results if node in [n.name for n in r.job_def.nodes_in_topological_order]
                for m in r.asset_materializations_for_node(node)]  # fmt: skip

    def get_asset_check_evaluations(self) -> list:
        return [e for r in self.results for e in r.get_asset_check_evaluations()]

    def __getattr__(self, name: str):
        return getattr(self.results[-1], name)


def run_stage(settings: Settings, stage: str, day: str, instance: dg.DagsterInstance | None = None, **kwargs):
    """Run a stage job in-process for one day with the resources ``settings`` builds: for
    ``ingest`` and ``nightly``, the load of every shard of the day first (as the CLI does)."""
    from pipelines.definitions import build
    from pipelines.partitions import day_shard_key, shard_keys

    defs = build(settings)
    instance = instance or dg.DagsterInstance.ephemeral()
    runs = []
    if stage in ("ingest", "nightly"):
        load = defs.resolve_job_def("load")
        for shard in shard_keys(defs.get_repository_def()):
            runs.append(load.execute_in_process(partition_key=day_shard_key(day, shard), instance=instance, **kwargs))
            if not runs[-1].success:
                return DayRuns(runs)
    runs.append(defs.resolve_job_def(stage).execute_in_process(partition_key=day, instance=instance, **kwargs))
    return DayRuns(runs)
