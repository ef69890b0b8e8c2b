"""Where captured records go: a local folder or an S3 bucket (boto3, imported only when used).

Keys follow the ``YYYY/MM/DD/`` layout tracelake lists by day:
``{prefix}YYYY/MM/DD/{span_id}.json``.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol


class Sink(Protocol):
    def write(self, key: str, data: bytes) -> None: ...


def object_key(occurred_at: datetime, span_id: str, prefix: str = "") -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in span_id)
    return f"{prefix}{occurred_at:%Y/%m/%d}/{safe}.json"


class LocalFolderSink:
    """Writes each record as a file under ``root`` (atomically: a reader never sees half a record)."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    def write(self, key: str, data: bytes) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class S3Sink:
    """Writes each record as an object in ``bucket`` under ``prefix`` (any S3-compatible endpoint)."""

    def __init__(self, bucket: str, prefix: str = "", client: Any = None, **client_kwargs: Any):
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        if client is None:
            import boto3  # optional: only S3 capture needs it

            client = boto3.client("s3", **client_kwargs)
        self.client = client

    def write(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data, ContentType="application/json")
