"""The object store: one interface over S3 and a folder, listing a day by the date in the key."""

import gzip
from datetime import date

import pytest
import zstandard

from pipelines.resources.object_store import CorruptObject, ObjectStore, decompress

DAY = date(2026, 11, 29)
KEYS = [
    "2026/11/29/support/00-000.jsonl.gz",
    "2026/11/29/triage/01.jsonl.zst",
    "2026/11/30/support/00-000.jsonl.gz",
    "2026/11/2/other.json",
    "year=2026/month=11/day=29/agent/01.jsonl",
    "year=2026/month=11/day=28/agent/01.jsonl",
    "export_id=e1/tenant_id=t1/session_id=s1/runs/year=2026/month=11/day=29/part-0.jsonl",
    "unrelated/2026/11/29/x.json",
]


def _fill_folder(root):
    for key in KEYS:
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"{}")


def _fill_bucket(s3):
    client = s3.client()
    for key in KEYS:
        client.put_object(Bucket=s3.bucket, Key=f"raw/{key}", Body=b"{}")


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_lists_a_day_in_both_layouts_and_nothing_else(kind, tmp_path, request):
    if kind == "local":
        _fill_folder(tmp_path)
        store = ObjectStore(uri=str(tmp_path))
    else:
        s3 = request.getfixturevalue("s3")
        _fill_bucket(s3)
        store = ObjectStore(uri=s3.uri("raw"), endpoint_url=s3.endpoint_url)
    keys = [o.key for o in store.list_day(DAY)]
    assert keys == sorted([KEYS[0], KEYS[1], KEYS[4]])
    assert all(o.etag and o.size == 2 for o in store.list_day(DAY))
    assert store.read(KEYS[4]) == b"{}"


def test_a_layout_with_wildcards_lists_one_export(tmp_path):
    _fill_folder(tmp_path)
    layout = "export_id=*/tenant_id=*/session_id=*/runs/year={yyyy}/month={mm}/day={dd}/"
    store = ObjectStore(uri=str(tmp_path), layouts=[layout])
    assert [o.key for o in store.list_day(DAY)] == [KEYS[6]]


def test_s3_listing_follows_pagination(s3):
    client = s3.client()
    for i in range(1005):  # S3 pages hold 1,000 keys
        client.put_object(Bucket=s3.bucket, Key=f"raw/2026/11/29/part-{i:04d}.json", Body=b"{}")
    store = ObjectStore(uri=s3.uri("raw"), endpoint_url=s3.endpoint_url)
    assert len(store.list_day(DAY)) == 1005


def test_a_rewritten_file_gets_a_new_etag(tmp_path):
    _fill_folder(tmp_path)
    store = ObjectStore(uri=str(tmp_path))
    before = {o.key: o.etag for o in store.list_day(DAY)}
    (tmp_path / KEYS[0]).write_bytes(b'{"a": 1}')
    after = {o.key: o.etag for o in store.list_day(DAY)}
    assert before[KEYS[0]] != after[KEYS[0]] and before[KEYS[1]] == after[KEYS[1]]


def test_decompression_by_suffix_and_corrupt_streams():
    data = b'{"a": 1}\n' * 100
    assert decompress("x.jsonl.gz", gzip.compress(data)) == data
    assert decompress("x.jsonl.zst", zstandard.ZstdCompressor().compress(data)) == data
    assert decompress("x.jsonl", data) == data
    with pytest.raises(CorruptObject, match="x.jsonl.gz: gzip stream is truncated"):
        decompress("x.jsonl.gz", gzip.compress(data)[:-12])
    with pytest.raises(CorruptObject, match="not a readable zstd stream"):
        decompress("x.jsonl.zst", b"definitely not zstd")
