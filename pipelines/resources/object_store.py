"""The raw trace source: an S3 bucket (any S3-compatible endpoint) or a local folder.

tracelake only lists and reads here; it never writes to the source. Keys are
relative to the source root (``s3://bucket/prefix/`` or the folder), so
layouts and per-prefix format overrides read the same on both backends.

A day's objects are found by the date in their key. A layout is a key
template with ``{yyyy}``, ``{mm}``, ``{dd}`` and ``*`` (one path segment); only
the literal prefix before the first wildcard is listed, so listing a day
never walks the whole bucket.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import cached_property
from pathlib import Path

import boto3
import dagster as dg
import zstandard
from botocore.config import Config
from pydantic import Field

DEFAULT_LAYOUTS = ("{yyyy}/{mm}/{dd}/", "year={yyyy}/month={mm}/day={dd}/")
# Bigger than any trace object we expect; a decompression bomb stops here.
MAX_DECOMPRESSED_BYTES = 2 * 1024**3


class CorruptObject(Exception):
    """An object whose bytes cannot be read as what its key says (truncated gzip, bad zstd frame)."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    etag: str
    size: int
    last_modified: datetime


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> (``bucket``, ``some/prefix/``)."""
    rest = uri.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} is not an s3://bucket[/prefix] URI")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def s3_client(endpoint_url: str | None = None, region: str | None = None, max_attempts: int = 5):
    """A boto3 S3 client with botocore's standard retry mode (backoff with
    jitter on throttling and 5xx), for AWS or any S3-compatible endpoint."""
    config = Config(retries={"mode": "standard", "max_attempts": max_attempts}, s3={"addressing_style": "path"})
    return boto3.client("s3", endpoint_url=endpoint_url or None, region_name=region or None, config=config)


def decompress(key: str, data: bytes) -> bytes:
    """Bytes of an object as its key's suffix says: ``.gz`` and ``.zst`` are
    decompressed, anything else is returned as is."""
    try:
        if key.endswith(".gz"):
            # zlib with a size cap instead of gzip.decompress: bounded memory
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            out = d.decompress(data, MAX_DECOMPRESSED_BYTES)
            if not d.eof:
                raise CorruptObject(f"{key}: gzip stream is truncated or over {MAX_DECOMPRESSED_BYTES} bytes")
            return out
        if key.endswith(".zst"):
            reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data))
            out = reader.read(MAX_DECOMPRESSED_BYTES + 1)
            if len(out) > MAX_DECOMPRESSED_BYTES:
                raise CorruptObject(f"{key}: zstd stream is over {MAX_DECOMPRESSED_BYTES} bytes")
            return out
    except (zlib.error, gzip.BadGzipFile, EOFError, zstandard.ZstdError) as e:
        kind = "gzip" if key.endswith(".gz") else "zstd"
        raise CorruptObject(f"{key}: not a readable {kind} stream ({e})") from None
    return data


def layout_pattern(layout: str, day: date) -> tuple[str, re.Pattern[str]]:
    """(literal prefix to list, regex a key must match) for one layout and day."""
    filled = layout.format(yyyy=f"{day.year:04d}", mm=f"{day.month:02d}", dd=f"{day.day:02d}")
    prefix = filled.split("*", 1)[0]
    regex = "^" + "[^/]*".join(re.escape(piece) for piece in filled.split("*"))
    return prefix, re.compile(regex)


class _S3:
    def __init__(self, uri: str, endpoint_url: str | None, region: str | None, max_attempts: int):
        self.bucket, self.root = split_s3_uri(uri)
        self.client = s3_client(endpoint_url, region, max_attempts)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.root + prefix):
            for obj in page.get("Contents", []):
                yield ObjectInfo(
                    key=obj["Key"][len(self.root) :],
                    etag=obj["ETag"].strip('"'),
                    size=obj["Size"],
                    last_modified=obj["LastModified"].astimezone(UTC),
                )

    def read(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=self.root + key)["Body"].read()

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.root}{key}"


class _Folder:
    def __init__(self, uri: str):
        self.root = Path(uri.removeprefix("file://")).expanduser().resolve()

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        # a prefix may end inside a path segment, as on S3
        base = self.root / prefix if prefix.endswith("/") or not prefix else (self.root / prefix).parent
        if not base.is_dir():
            return
        for path in sorted(base.rglob("*")):
            if not path.is_file():
                continue
            key = path.relative_to(self.root).as_posix()
            if not key.startswith(prefix):
                continue
            stat = path.stat()
            yield ObjectInfo(
                key=key,
                # no content hash for files: size and mtime change when the file does
                etag=f"{stat.st_size:x}-{stat.st_mtime_ns:x}",
                size=stat.st_size,
                last_modified=datetime.fromtimestamp(stat.st_mtime, UTC),
            )

    def read(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def uri(self, key: str) -> str:
        return str(self.root / key)


class ObjectStore(dg.ConfigurableResource):
    """Raw traces in S3 or a local folder, listed by day and read (decompressed)."""

    uri: str = Field(description="s3://bucket/prefix or a local folder")
    layouts: list[str] = Field(default=list(DEFAULT_LAYOUTS), description="key templates that carry the date")
    format_overrides: dict[str, str] = Field(
        default_factory=dict, description="key prefix -> format name, for objects detection cannot tell"
    )
    endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint (AWS_ENDPOINT_URL)")
    region: str | None = None
    max_attempts: int = 5

    @cached_property
    def backend(self) -> _S3 | _Folder:
        if self.uri.startswith("s3://"):
            return _S3(self.uri, self.endpoint_url, self.region, self.max_attempts)
        return _Folder(self.uri)

    def list_day(self, day: date) -> list[ObjectInfo]:
        """Every object whose key carries ``day`` in one of the layouts, sorted by key."""
        found: dict[str, ObjectInfo] = {}
        for layout in self.layouts:
            prefix, pattern = layout_pattern(layout, day)
            for info in self.backend.list(prefix):
                if pattern.match(info.key):
                    found[info.key] = info
        return [found[k] for k in sorted(found)]

    def read(self, key: str) -> bytes:
        """The object's bytes, decompressed per its suffix; raises CorruptObject."""
        return decompress(key, self.backend.read(key))

    def uri_for(self, key: str) -> str:
        return self.backend.uri(key)
