"""Writing demo objects to a folder or an S3 prefix.

This is the demo *application* writing its logs; the tracelake pipeline itself
never writes to the source. Bytes are deterministic (gzip without a
timestamp), and a file whose bytes are unchanged is not rewritten, so
regenerating the same demo leaves etags alone and a re-run ingests nothing.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import zstandard

from pipelines.s3 import s3_client, split_s3_uri


def encode(key: str, data: bytes) -> bytes:
    if key.endswith(".gz"):
        return gzip.compress(data, compresslevel=6, mtime=0)
    if key.endswith(".zst"):
        return zstandard.ZstdCompressor(level=3).compress(data)
    return data


class ObjectWriter:
    def __init__(self, uri: str, endpoint_url: str | None = None, region: str | None = None):
        self.uri = uri
        if uri.startswith("s3://"):
            self.bucket, self.root = split_s3_uri(uri)
            self.client = s3_client(endpoint_url, region)
        else:
            self.folder = Path(uri).expanduser()
            self.client = None

    def put(self, key: str, data: bytes) -> int:
        """Write ``data`` (compressed per the key's suffix); returns bytes written."""
        body = encode(key, data)
        if self.client is not None:
            self.client.put_object(Bucket=self.bucket, Key=self.root + key, Body=body)
            return len(body)
        path = self.folder / key
        if path.exists() and path.read_bytes() == body:
            return len(body)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        return len(body)
