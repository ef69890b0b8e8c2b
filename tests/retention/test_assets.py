"""The `retention` and `retention_coverage` assets, materialized in-process over the ingested demo."""

from __future__ import annotations

import dagster as dg
import polars as pl

from assets.retention import retention, retention_coverage
from pipelines.resources.policies import Redaction, RetentionPolicy
from tests.retention.environment import DAYS


def _materialize(assets, warehouse, day, policy: RetentionPolicy, instance) -> dg.ExecuteInProcessResult:
    resources = {"warehouse": warehouse, "retention_policy": policy}
    result = dg.materialize(assets, resources=resources, partition_key=day.isoformat(), instance=instance)
    assert result.success
    return result


def test_retention_decides_every_call_of_the_day_and_a_rerun_commits_nothing(warehouse):
    day = DAYS[1]
    with dg.instance_for_test() as instance:
        first = _materialize([retention], warehouse, day, RetentionPolicy(), instance)
        version = warehouse.version("retention")
        second = _materialize([retention], warehouse, day, RetentionPolicy(), instance)
    calls = warehouse.read("calls", pl.col("occurred_date") == day, ["call_id"])
    decided = warehouse.read("retention")
    assert sorted(decided["call_id"]) == sorted(calls["call_id"])
    meta = first.asset_materializations_for_node("decide_retention")[0].metadata
    assert meta["calls"].value == calls.height
    assert meta["kept_full"].value == decided.filter(pl.col("tier") == "full").height
    assert meta["kept_by_rule"].value + meta["kept_by_sampling"].value == meta["kept_full"].value
    assert "segment:vip" in meta["reasons"].value and meta["policy_version"].value == "1"
    assert second.asset_materializations_for_node("decide_retention")[0].metadata["committed"].value is False
    assert warehouse.version("retention") == version


def test_coverage_flags_the_segments_with_no_call_kept_in_full(warehouse, tmp_path):
    # fewer rules, and triage never sampled: triage segments without a rule hit fall out of the sample
    policy_file = tmp_path / "retention.yaml"
    policy_file.write_text(
        """
version: coverage-test
always_keep:
  segments: []
  eval_score_below: null
  tail: null
strata:
  rates:
    - match: {route: support.triage}
      rate: 0.0
coverage:
  window_days: 3
"""
    )
    policy = RetentionPolicy(path=str(policy_file))
    with dg.instance_for_test() as instance:
        for day in DAYS:
            _materialize([retention], warehouse, day, policy, instance)
        result = _materialize([retention_coverage], warehouse, DAYS[-1], policy, instance)

    rows = warehouse.read("retention_coverage")
    decided = warehouse.read("retention")
    assert set(rows["window_start"]) == {DAYS[0]} and set(rows["window_end"]) == {DAYS[-1]}
    assert rows["calls_seen"].sum() == decided.height
    full = decided.filter(pl.col("tier") == "full").group_by("service", "user_tier", "language", "input_bucket").len()
    joined = rows.join(full, on=["service", "user_tier", "language", "input_bucket"], how="left")
    assert (joined["kept_full"] == joined["len"].fill_null(0)).all()
    assert (rows["uncovered"] == (rows["kept_full"] == 0)).all()
    uncovered = rows.filter("uncovered")
    assert uncovered.height > 0 and (uncovered["calls_seen"] > 0).all()
    assert set(uncovered["service"]) == {"support.triage"}
    triage = rows.filter(pl.col("service") == "support.triage")
    assert (triage["kept_by_sampling"] == 0).all() and (triage["expected_full"] == triage["kept_by_rule"]).all()
    meta = result.asset_materializations_for_node("retention_coverage")[0].metadata
    assert meta["uncovered_segments"].value == uncovered.height
    table = meta["coverage"].value
    assert "| support.triage |" in table and "**no**" in table and "strata.rates" in table


def test_the_retention_stage_job_runs_next_to_the_other_stages(warehouse, demo):
    """A stage job named `retention` (as pipelines/jobs.py names stages) does not clash with the asset's op."""
    from assets import ingest
    from pipelines.resources.object_store import ObjectStore
    from pipelines.resources.stores import TemplateStore

    stage = dg.define_asset_job("retention", selection=dg.AssetSelection.groups("retention"))
    defs = dg.Definitions(
        assets=[ingest.raw_traces, ingest.traces, retention, retention_coverage],
        jobs=[stage],
        resources={
            "warehouse": warehouse,
            "retention_policy": RetentionPolicy(),
            "redaction": Redaction(),
            "template_store": TemplateStore(uri=str(demo.root / "stores")),  # none: prompts read whole
            "source": ObjectStore(uri=demo.source),
        },
    )
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("retention").execute_in_process(
            partition_key=DAYS[1].isoformat(), instance=instance
        )
    assert result.success
    assert {e.asset_key.path[-1] for e in result.get_asset_materialization_events()} == {
        "retention",
        "retention_coverage",
    }
