"""Faults between tracelake and its stores, injected by a proxy in front of
moto's S3 server (tests/fault_proxy.py), and broken or hostile compressed
objects: reads are retried, a commit whose response was lost is recognized,
a truncated stream keeps the records before the break, a bomb costs at most the cap."""

import gzip
import json
import threading
import time
import tracemalloc
from datetime import UTC, date, datetime

import pytest
import zstandard

from pipelines.ingest.objects import SourceObject, ingest_object
from pipelines.resources import object_store
from pipelines.resources.object_store import CorruptObject, ObjectStore, decompress
from pipelines.retrying import SourceUnavailable
from tests.environments import S3
from tests.fault_proxy import FaultProxy

DAY = date(2026, 11, 29)
NOW = datetime(2026, 11, 30, tzinfo=UTC)


@pytest.fixture
def proxied(s3: S3):
    """(the bucket as seen through the fault proxy, the proxy)."""
    with FaultProxy(s3.endpoint_url) as proxy:
        yield S3(proxy.url, s3.bucket), proxy


def _frozen(i: int) -> str:
    return json.dumps(
        {
            "format": "tracelake.frozen_call",
            "trace_id": f"t{i}",
            "occurred_at": "2026-11-29T10:00:00Z",
            "model": {"id": "claude-haiku-4-5"},
            "request": {"model": "claude-haiku-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        }
    )


# --- source reads (boto3) -------------------------------------------------


def test_truncated_and_reset_source_bodies_are_read_again(proxied):
    bucket, proxy = proxied
    data = "\n".join(_frozen(i) for i in range(200)).encode()
    bucket.client().put_object(Bucket=bucket.bucket, Key="raw/2026/11/29/calls.jsonl", Body=data)
    store = ObjectStore(uri=bucket.uri("raw"), endpoint_url=bucket.endpoint_url, region="us-east-1", max_attempts=4)
    truncated = proxy.add("truncate", "GET", r"calls\.jsonl", times=2)
    reset = proxy.add("reset", "GET", r"calls\.jsonl", times=1)
    assert store.read("2026/11/29/calls.jsonl") == data
    assert (proxy.hits(truncated), proxy.hits(reset)) == (2, 1)


def test_a_body_that_keeps_breaking_names_the_object(proxied):
    bucket, proxy = proxied
    bucket.client().put_object(Bucket=bucket.bucket, Key="raw/2026/11/29/calls.jsonl", Body=b"x" * 10_000)
    store = ObjectStore(uri=bucket.uri("raw"), endpoint_url=bucket.endpoint_url, region="us-east-1", max_attempts=2)
    proxy.add("truncate", "GET", r"calls\.jsonl", times=100)
    with pytest.raises(SourceUnavailable, match=r"s3://.*/raw/2026/11/29/calls\.jsonl: the response body broke off"):
        store.read("2026/11/29/calls.jsonl")


def test_a_request_that_keeps_failing_is_sent_max_attempts_times_not_their_square(proxied):
    """botocore retries a request whose connection is reset; the body's own retry does not
    retry it again (an endpoint that was down got up to 5 x 6 requests per object, with backoff)."""
    bucket, proxy = proxied
    bucket.client().put_object(Bucket=bucket.bucket, Key="raw/2026/11/29/calls.jsonl", Body=b"x" * 100)
    store = ObjectStore(uri=bucket.uri("raw"), endpoint_url=bucket.endpoint_url, region="us-east-1", max_attempts=3)
    reset = proxy.add("reset", "GET", r"calls\.jsonl", times=100)
    with pytest.raises(SourceUnavailable, match=r"s3://.*/raw/2026/11/29/calls\.jsonl: the request failed 3 times"):
        store.read("2026/11/29/calls.jsonl")
    assert proxy.hits(reset) == 3


def test_the_rendezvous_holds_reads_until_every_party_reads_at_once(proxied):
    """The proof test_shard_partitions uses that four shard runs read at the same time:
    one party alone waits its hold and goes on unmet; with every party reading, they meet."""
    bucket, proxy = proxied
    client = bucket.client()
    for name in ("a", "b"):
        client.put_object(Bucket=bucket.bucket, Key=f"raw/{name}.jsonl", Body=name.encode())
    proxy.rendezvous("GET", [r"/raw/a\.jsonl", r"/raw/b\.jsonl"], hold_seconds=1)
    started = time.monotonic()
    assert client.get_object(Bucket=bucket.bucket, Key="raw/a.jsonl")["Body"].read() == b"a"
    assert time.monotonic() - started >= 1 and not proxy.met(), "a party alone waited its hold, unmet"

    proxy.rendezvous("GET", [r"/raw/a\.jsonl", r"/raw/b\.jsonl"], hold_seconds=30)
    first = threading.Thread(target=lambda: client.get_object(Bucket=bucket.bucket, Key="raw/a.jsonl"))
    started = time.monotonic()
    first.start()
    time.sleep(0.5)
    assert first.is_alive() and not proxy.met(), "a waits for b"
    assert client.get_object(Bucket=bucket.bucket, Key="raw/b.jsonl")["Body"].read() == b"b"
    first.join(timeout=10)
    assert not first.is_alive() and proxy.met() and time.monotonic() - started < 10


# --- Delta (delta-rs) -----------------------------------------------------


def _quarantine(ids):
    return [{"quarantine_id": f"q{i}", "source_key": "k", "line": i, "message": "m"} for i in ids]


def test_a_commit_whose_response_was_lost_is_recognized_not_repeated(proxied):
    bucket, proxy = proxied
    warehouse = bucket.warehouse()
    warehouse.merge("quarantine", _quarantine(range(5)))
    lost = proxy.add("lose_response", "PUT", r"_delta_log/\d+\.json")
    result = warehouse.merge("quarantine", _quarantine(range(5, 8)))
    assert proxy.hits(lost) == 1, "the commit's PUT landed and its response was dropped"
    assert (result.committed, result.inserted, result.version) == (True, 3, 2)
    history = [c["operation"] for c in warehouse.table("quarantine").history()]
    # newest first: this write, once; the first write; the empty table's creation
    assert history == ["WRITE", "WRITE", "WRITE"], "one commit for the write, not two"
    assert warehouse.read("quarantine").height == 8


def test_delta_reads_survive_truncated_and_reset_responses(proxied):
    bucket, proxy = proxied
    warehouse = bucket.warehouse()
    warehouse.merge("quarantine", _quarantine(range(20)))
    rules = [
        proxy.add("truncate", "GET", r"\.parquet", times=2),
        proxy.add("truncate", "GET", r"_delta_log/\d+\.json", times=1),
        proxy.add("reset", "GET", r"_delta_log/\d+\.json", times=1),
    ]
    assert sorted(warehouse.read("quarantine")["line"].to_list()) == list(range(20))
    assert [proxy.hits(r) for r in rules] == [2, 1, 1]


def test_a_truncated_or_reset_listing_of_the_log_is_read_again(proxied):
    """Loading a table lists its _delta_log: a LIST response cut in half, or a reset, is
    tried again like any other read, for a write as for a read."""
    bucket, proxy = proxied
    warehouse = bucket.warehouse()
    warehouse.merge("quarantine", _quarantine(range(20)))
    listing = r"list-type=2.*_delta_log"
    rules = [proxy.add("truncate", "GET", listing, times=1), proxy.add("reset", "GET", listing, times=1)]
    assert sorted(warehouse.read("quarantine")["line"].to_list()) == list(range(20))
    rules += [proxy.add("truncate", "GET", listing, times=2)]
    assert warehouse.merge("quarantine", _quarantine(range(20, 25))).inserted == 5
    assert [proxy.hits(r) for r in rules] == [1, 1, 2]
    assert warehouse.read("quarantine").height == 25


# --- compressed objects ---------------------------------------------------

# big enough for several zstd blocks (128 KiB each): a cut leaves whole blocks before it
LINES = [_frozen(i) for i in range(3000)]
PLAIN = "\n".join(LINES).encode()


@pytest.mark.parametrize(
    "key,compressed",
    [
        ("2026/11/29/calls.jsonl.gz", gzip.compress(PLAIN)),
        ("2026/11/29/calls.jsonl.zst", zstandard.ZstdCompressor().compress(PLAIN)),
    ],
)
def test_a_truncated_stream_keeps_the_records_before_the_break(key, compressed):
    cut = compressed[: len(compressed) * 2 // 3]
    with pytest.raises(CorruptObject) as caught:
        decompress(key, cut)
    partial = caught.value.partial
    assert partial and PLAIN.startswith(partial) and len(partial) < len(PLAIN)
    complete = partial.count(b"\n")  # lines that ended before the break
    obj = SourceObject(key=key, uri=f"/raw/{key}", etag="e", size=len(cut), last_modified=NOW, data=partial)
    obj = SourceObject(**{**obj.__dict__, "read_error": str(caught.value)})
    batch = ingest_object(obj, DAY, "run", NOW)
    (log,) = batch.ingest_log
    assert log["records_ingested"] == complete == len(batch.calls)
    assert log["records_read"] == log["records_ingested"] + log["records_quarantined"]
    assert log["records_quarantined"] == (0 if partial.endswith(b"\n") else 1) and log["status"] == "partial"
    assert {(q["scope"], q["error_class"]) for q in batch.quarantine} >= {("object", "corrupt_object")}
    assert [c["trace_id"] for c in batch.calls] == [f"t{i}" for i in range(complete)]


@pytest.mark.parametrize(
    "key,compress",
    [("bomb.jsonl.gz", lambda b: gzip.compress(b, 1)), ("bomb.jsonl.zst", zstandard.ZstdCompressor(level=1).compress)],
)
def test_a_decompression_bomb_costs_at_most_the_cap(key, compress):
    cap = 4 * 1024 * 1024
    bomb = compress(b"\0" * (256 * 1024 * 1024))  # 256 MiB of zeros
    assert len(bomb) < 2 * 1024 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(CorruptObject, match="over 4194304 bytes"):
            decompress(key, bomb, cap)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * cap, f"decompressing held {peak} bytes; the cap is {cap}"


def test_decompressions_run_at_most_the_configured_number_at_once(tmp_path, monkeypatch):
    folder = tmp_path / "2026" / "11" / "29"
    folder.mkdir(parents=True)
    for i in range(8):
        (folder / f"{i}.jsonl.gz").write_bytes(gzip.compress(PLAIN))
    running, most = 0, 0
    lock = threading.Lock()
    real = object_store.decompress

    def counting(key, data, cap):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.02)  # long enough for unbounded threads to overlap
        try:
            return real(key, data, cap)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(object_store, "decompress", counting)
    store = ObjectStore(uri=str(tmp_path), max_concurrent_decompressions=2)
    threads = [threading.Thread(target=store.read, args=(f"2026/11/29/{i}.jsonl.gz",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 2
