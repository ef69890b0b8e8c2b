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

import functools
import hashlib
import os
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import botocore.exceptions
import dagster as dg
import urllib3.exceptions
import zstandard
from pydantic import Field

from pipelines.ingest.objects import SourceObject
from pipelines.ingest.shards import ShardSpec
from pipelines.retrying import gave_up, read_again
from pipelines.s3 import s3_client, split_s3_uri

T = TypeVar("T")
DEFAULT_LAYOUTS = ("{yyyy}/{mm}/{dd}/", "year={yyyy}/month={mm}/day={dd}/")
# Bigger than any trace object we expect; a decompression bomb stops here.
MAX_DECOMPRESSED_BYTES = 1024**3
# Objects decompressed at once: with the cap, what a bomb can cost in memory.
MAX_CONCURRENT_DECOMPRESSIONS = 2
# zstd expands at most ~32768x (an RLE block of 4 bytes -> 128 KiB): input is
# fed in pieces small enough that one piece cannot overshoot the cap by much.
ZSTD_MAX_RATIO = 32768
# Errors of a response body that broke off (reset, truncated, timed out): read again.
RETRYABLE_READS = (
    botocore.exceptions.IncompleteReadError,
    botocore.exceptions.ResponseStreamingError,
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ConnectionClosedError,
    botocore.exceptions.EndpointConnectionError,
    urllib3.exceptions.ProtocolError,
    ConnectionError,
)


class CorruptObject(Exception):
    """An object whose bytes cannot be read as what its key says (truncated gzip, bad zstd frame).

    ``partial`` holds what decompressed before the break, so the complete
    records before it can still be ingested; None when nothing is usable (a
    stream over the size cap)."""

    def __init__(self, message: str, partial: bytes | None = None):
        super().__init__(message)
        self.partial = partial


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    etag: str
    size: int
    last_modified: datetime


def _gunzip(key: str, data: bytes, cap: int) -> bytes:
    out = bytearray()
    pending = data
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    while True:
        try:
            # max_length bounds the output of each step: memory stays under the cap
            out += d.decompress(pending, cap + 1 - len(out))
        except zlib.error as e:
            raise CorruptObject(f"{key}: not a readable gzip stream ({e})", bytes(out)) from None
        if len(out) > cap:
            raise CorruptObject(f"{key}: gzip stream decompresses to over {cap} bytes (the cap); not read")
        if d.eof:
            pending = d.unused_data
            if not pending.strip(b"\0"):
                return bytes(out)
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # a multi-member gzip
            continue
        pending = d.unconsumed_tail
        if not pending:
            raise CorruptObject(f"{key}: gzip stream is truncated", bytes(out))


def _unzstd(key: str, data: bytes, cap: int) -> bytes:
    out = bytearray()
    view = memoryview(data)
    d = zstandard.ZstdDecompressor().decompressobj()
    pos = 0
    while pos < len(view):
        step = max(256, (cap - len(out)) // ZSTD_MAX_RATIO)
        try:
            out += d.decompress(view[pos : pos + step])
        except zstandard.ZstdError as e:
            raise CorruptObject(f"{key}: not a readable zstd stream ({e})", bytes(out)) from None
        pos += step
        if len(out) > cap:
            raise CorruptObject(f"{key}: zstd stream decompresses to over {cap} bytes (the cap); not read")
        if d.eof:
            rest = d.unused_data + bytes(view[pos:])
            if not rest:
                return bytes(out)
            view, pos = memoryview(rest), 0
            d = zstandard.ZstdDecompressor().decompressobj()  # the next frame
    raise CorruptObject(f"{key}: zstd stream is truncated", bytes(out))


def decompress(key: str, data: bytes, cap: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """Bytes of an object as its key's suffix says: ``.gz`` and ``.zst`` are
    decompressed (streaming, never more than ``cap`` bytes of output), anything
    else is returned as is. Raises CorruptObject with what came before a break."""
    if key.endswith(".gz"):
        return _gunzip(key, data, cap)
    if key.endswith(".zst"):
        return _unzstd(key, data, cap)
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

    def read(self, key: str, attempts: int) -> bytes:
        """The whole body. botocore retries the request (``attempts`` times, with backoff) but not
        a body that breaks off mid-stream (reset, truncated): that is read again here."""

        def once() -> bytes:
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=self.root + key)
            except RETRYABLE_READS as e:  # botocore's attempts ran out: not a second round of them
                raise gave_up(f"{self.uri(key)}: the request failed", attempts, e) from e
            body = response["Body"].read()
            if len(body) != response["ContentLength"]:
                raise botocore.exceptions.IncompleteReadError(
                    actual_bytes=len(body), expected_bytes=response["ContentLength"]
                )
            return body

        failed = f"{self.uri(key)}: the response body broke off (nothing of it was ingested)"
        return read_again(once, attempts, RETRYABLE_READS, failed)

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.root}{key}"


@functools.lru_cache(maxsize=65536)
def _md5(path: str, size: int, mtime_ns: int) -> str:
    """A file's MD5, read once per (path, size, mtime): a listing re-reads only changed files."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _content_etag(path: Path, stat: os.stat_result) -> str:
    return _md5(str(path), stat.st_size, stat.st_mtime_ns)


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
                # the content's MD5, as S3 gives a single-part object: a copied or touched
                # folder (new file times, same bytes) is not new
                etag=_content_etag(path, stat),
                size=stat.st_size,
                last_modified=datetime.fromtimestamp(stat.st_mtime, UTC),
            )

    def read(self, key: str, attempts: int) -> bytes:
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
    max_decompressed_bytes: int = Field(
        default=MAX_DECOMPRESSED_BYTES, description="output cap per compressed object (a bomb stops here)"
    )
    max_concurrent_decompressions: int = MAX_CONCURRENT_DECOMPRESSIONS
    shards: str = Field(
        default="1", description="how a day splits into shard runs: 1, hour:N or hash:N (TRACELAKE_SHARDS)"
    )

    @cached_property
    def backend(self) -> _S3 | _Folder:
        if self.uri.startswith("s3://"):
            return _S3(self.uri, self.endpoint_url, self.region, self.max_attempts)
        return _Folder(self.uri)

    @property
    def shard_spec(self) -> ShardSpec:
        return ShardSpec.parse(self.shards)

    def list_day(self, day: date, shard: int | None = None) -> list[ObjectInfo]:
        """Every object whose key carries ``day`` in one of the layouts, sorted by key;
        with ``shard``, only those of that shard of the day (``shards``)."""
        found = self._day_objects(day)
        return [info for key, (info, s) in sorted(found.items()) if shard is None or s == shard]

    def list_day_by_shard(self, day: date) -> dict[int, list[ObjectInfo]]:
        """The day's objects by shard (every shard, empty or not), each sorted by key."""
        by_shard: dict[int, list[ObjectInfo]] = {s: [] for s in range(self.shard_spec.count)}
        for _, (info, s) in sorted(self._day_objects(day).items()):
            by_shard[s].append(info)
        return by_shard

    def _day_objects(self, day: date) -> dict[str, tuple[ObjectInfo, int]]:
        found: dict[str, tuple[ObjectInfo, int]] = {}
        spec = self.shard_spec
        for layout in self.layouts:
            prefix, pattern = layout_pattern(layout, day)
            for info in self.backend.list(prefix):
                if matched := pattern.match(info.key):
                    # an hour is looked for after the key's date
                    found[info.key] = (info, spec.shard_of(info.key, info.key[matched.end() :]))
        return found

    @cached_property
    def decompression_slots(self) -> threading.BoundedSemaphore:
        return threading.BoundedSemaphore(self.max_concurrent_decompressions)

    def source_object(self, info: ObjectInfo) -> SourceObject:
        """``info``'s object as the ingest core takes it: its bytes, or, for a
        corrupt one, what came before the break and why."""
        fields = dict(
            key=info.key, uri=self.uri_for(info.key), etag=info.etag, size=info.size, last_modified=info.last_modified
        )
        try:
            return SourceObject(**fields, data=self.read(info.key))
        except CorruptObject as e:
            return SourceObject(**fields, data=e.partial, read_error=str(e))

    def read(self, key: str) -> bytes:
        """The object's bytes, decompressed per its suffix; raises CorruptObject
        (with what came before a break) or SourceUnavailable (retries ran out)."""
        data = self.backend.read(key, self.max_attempts)
        if not key.endswith((".gz", ".zst")):
            return data
        with self.decompression_slots:
            return decompress(key, data, self.max_decompressed_bytes)

    def uri_for(self, key: str) -> str:
        return self.backend.uri(key)
