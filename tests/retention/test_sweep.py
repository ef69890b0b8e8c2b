"""The sweep: past the hot window, the text of ingredients-tier calls leaves the
files on disk (not just the table), their ingredients and hashes stay, a call
flagged before its sweep is kept, and a second run changes nothing."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import polars as pl

from assets.retention import retention, retention_sweep
from pipelines.demo import generate
from pipelines.resources.policies import RetentionPolicy
from pipelines.resources.warehouse import Warehouse
from pipelines.retention.policy import load_policy
from pipelines.retention.sweep import sweep
from tests.environments import s3_settings
from tests.retention.environment import DAYS, END, ingest, settings_for
from tests.retention.planted import KEPT, SWEPT, files_holding, write_planted

TODAY = END + timedelta(days=8)  # every demo day is past the 7-day hot window
INGREDIENTS = (
    "template_id",
    "template_version",
    "template_variables_json",
    "request_sha256",
    "rendered_request_sha256",
    "block_hashes",
    "usage",
    "status",
    "record_sha256",
    "service",
    "segment",
    "tool_definitions",
)


def decide_days(warehouse: Warehouse) -> None:
    """The nightly `retention` asset, for every demo day."""
    resources = {"warehouse": warehouse, "retention_policy": RetentionPolicy()}
    with dg.instance_for_test() as instance:
        for day in DAYS:
            result = dg.materialize([retention], resources=resources, partition_key=day.isoformat(), instance=instance)
            assert result.success


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _row(warehouse: Warehouse, trace_id: str) -> dict:
    return warehouse.read("calls", pl.col("trace_id") == trace_id).to_dicts()[0]


def test_swept_text_is_gone_from_the_files_and_ingredients_stay(warehouse, demo):
    root = Path(warehouse.uri)
    decide_days(warehouse)
    before = _row(warehouse, demo.planted.swept_trace)
    # the detector finds the planted strings before the sweep: its silence afterwards means something
    assert files_holding(root / "calls", SWEPT) and files_holding(root / "calls", KEPT)
    calls_bytes = disk_bytes(root / "calls")

    # the sweep's clock is compared with calls.ingested_at, which ingest sets from the real clock
    now = datetime.now(UTC)
    report = sweep(warehouse, load_policy(), TODAY, now)

    assert report.days == DAYS
    assert report.calls_stripped > 1000 and report.spans_stripped > 100
    assert files_holding(root, SWEPT) == []
    assert files_holding(root / "calls", KEPT)
    after = _row(warehouse, demo.planted.swept_trace)
    for column in ("system_text", "request_json", "output_text"):
        assert before[column] and after[column] is None
    assert {k: after[k] for k in INGREDIENTS} == {k: before[k] for k in INGREDIENTS}
    assert [d["doc_id"] for d in after["retrieval"]["documents"]] == [
        d["doc_id"] for d in before["retrieval"]["documents"]
    ]
    assert [d["text_sha256"] for d in after["retrieval"]["documents"]] == [
        d["text_sha256"] for d in before["retrieval"]["documents"]
    ]
    assert all(d["text"] is None for d in after["retrieval"]["documents"])
    assert [(m["role"], [p["type"] for p in m["parts"]]) for m in after["messages"]] == [
        (m["role"], [p["type"] for p in m["parts"]]) for m in before["messages"]
    ]
    kept = _row(warehouse, demo.planted.kept_trace)
    assert KEPT in kept["output_text"]
    # the bytes left the disk: the table shrank, it did not just hide rows (under zstd the
    # demo's repetitive text is a small share of the bytes; hex ids and digests are most of them)
    assert disk_bytes(root / "calls") < 0.97 * calls_bytes
    decided = warehouse.read("retention", pl.col("trace_id") == demo.planted.swept_trace).to_dicts()[0]
    assert decided["tier"] == "ingredients" and decided["swept_at"] == now


def test_spans_of_swept_sessions_keep_only_their_metadata(warehouse):
    decide_days(warehouse)
    sweep(warehouse, load_policy(), TODAY, datetime.now(UTC))
    tiers = warehouse.read("retention").group_by("trace_id").agg(pl.col("tier").first())
    tools = warehouse.read("spans", pl.col("kind") == "tool").join(tiers, on="trace_id")
    swept = [json.loads(a) for a in tools.filter(pl.col("tier") == "ingredients")["attributes_json"]]
    full = [json.loads(a) for a in tools.filter(pl.col("tier") == "full")["attributes_json"]]
    assert swept and full
    assert all("result" not in a and "arguments" not in a and a["name"] for a in swept)
    assert all("result" in a and "arguments" in a for a in full)
    thoughts = warehouse.read("spans", pl.col("kind") == "think").join(tiers, on="trace_id")
    assert thoughts.filter(pl.col("tier") == "ingredients")["attributes_json"].is_null().all()


def test_a_late_thumbs_down_before_the_sweep_keeps_the_session(warehouse):
    decide_days(warehouse)
    decided = warehouse.read("retention", pl.col("occurred_date") == DAYS[1])
    sizes = decided.group_by("trace_id").agg(pl.len().alias("calls"), pl.col("tier").first())
    trace_id = sizes.filter((pl.col("tier") == "ingredients") & (pl.col("calls") >= 2))["trace_id"][0]
    row = warehouse.read("calls", pl.col("trace_id") == trace_id).sort("occurred_at").to_dicts()[0]
    thumbs_down = {"source": "user", "name": "thumbs", "value_string": "down", "created_at": datetime.now(UTC)}
    row.update(feedback=[thumbs_down], record_sha256="late-feedback")
    warehouse.merge("calls", [row], partitions=[row["occurred_date"]])

    report = sweep(warehouse, load_policy(), TODAY, datetime.now(UTC))

    session = warehouse.read("calls", pl.col("trace_id") == trace_id)
    assert session.height >= 2 and session["output_messages"].is_not_null().all()
    assert session["request_json"].is_not_null().all()
    now_decided = warehouse.read("retention", pl.col("trace_id") == trace_id)
    assert (now_decided["tier"] == "full").all()
    assert now_decided["reasons"].list.contains("negative_feedback").any()
    assert now_decided["reasons"].list.contains("trace:negative_feedback").any()
    assert report.kept_late >= session.height


def test_a_second_sweep_finds_nothing_and_commits_nothing(warehouse, tmp_path):
    decide_days(warehouse)
    first = sweep(warehouse, load_policy(), TODAY, datetime.now(UTC))
    versions = {t: warehouse.version(t) for t in ("calls", "spans", "retention")}
    with dg.instance_for_test() as instance:
        result = retention_sweep.execute_in_process(
            resources={"warehouse": warehouse, "retention_policy": RetentionPolicy()},
            run_config={"ops": {"sweep_expired_text": {"config": {"today": TODAY.isoformat()}}}},
            instance=instance,
        )
        assert result.success
        again = dg.materialize(
            [retention],
            resources={"warehouse": warehouse, "retention_policy": RetentionPolicy()},
            partition_key=DAYS[0].isoformat(),
            instance=instance,
        )
    assert first.days == DAYS
    assert {t: warehouse.version(t) for t in versions} == versions
    metadata = again.asset_materializations_for_node("decide_retention")[0].metadata
    assert metadata["committed"].value is False


def test_the_sweep_frees_text_on_s3(s3, tmp_path):
    day = DAYS[1]
    source = str(tmp_path / "source")
    generate(source, calls=80, days=1, seed=11, end=day)
    write_planted(source, day)
    warehouse = s3.warehouse()
    ingest(s3_settings(s3, source_uri=source, warehouse_uri=warehouse.uri), [day])
    assert files_holding(s3.download("wh/calls/", tmp_path / "before"), SWEPT)

    report = sweep(warehouse, load_policy(), TODAY, datetime.now(UTC))

    assert report.days == [day] and report.calls_stripped > 0
    mirror = s3.download("wh/", tmp_path / "after")
    assert files_holding(mirror, SWEPT) == []
    assert files_holding(mirror / "wh" / "calls", KEPT)
    assert report.bytes_after["calls"] < report.bytes_before["calls"]


def test_text_brought_back_by_a_reingest_is_swept_again(warehouse, demo, tmp_path):
    root = Path(warehouse.uri)
    decide_days(warehouse)
    sweep(warehouse, load_policy(), TODAY, datetime.now(UTC))
    # the application re-exports an old object with a small change: a new etag, so ingest reads it again
    source = tmp_path / "source"
    shutil.copytree(demo.source, source)
    planted = source / f"{DAYS[1]:%Y/%m/%d}" / "support" / "planted.jsonl"
    lines = planted.read_text().splitlines()
    first = json.loads(lines[0])
    first["tags"] = ["re-exported"]
    planted.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    ingest(settings_for(str(source), warehouse.uri), [DAYS[1]])
    assert SWEPT in _row(warehouse, demo.planted.swept_trace)["output_text"]

    report = sweep(warehouse, load_policy(), TODAY, datetime.now(UTC))

    assert report.days == [DAYS[1]] and report.calls_stripped == 1
    assert _row(warehouse, demo.planted.swept_trace)["output_text"] is None
    assert files_holding(root, SWEPT) == []
    assert sweep(warehouse, load_policy(), TODAY, datetime.now(UTC)).days == []
