"""S3 as every part of tracelake reaches it (the source, the stores, the demo's writer):
path-style addressing for any S3-compatible endpoint, and botocore's standard retries."""

from __future__ import annotations

import boto3
from botocore.config import Config


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> (``bucket``, ``some/prefix/``)."""
    rest = uri.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} is not an s3://bucket[/prefix] URI")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def s3_client(endpoint_url: str | None = None, region: str | None = None, max_attempts: int = 5):
    """A boto3 S3 client with botocore's standard retry mode (backoff with jitter on throttling,
    5xx and connection errors; ``max_attempts`` counts the first), for AWS or any S3-compatible endpoint."""
    config = Config(
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        s3={"addressing_style": "path"},
        connect_timeout=10,
        read_timeout=60,
    )
    return boto3.client("s3", endpoint_url=endpoint_url or None, region_name=region or None, config=config)
