"""Prompt caching that pays: the demo's long-prompt route (~900-token system prompt, six
~600-token articles, three tools) replayed for the demo's kb-haiku candidate through the
Dagster assets, the real SDK and the simulator: the plan expects cache reads, the bill has them."""

from __future__ import annotations

import json
import shutil
from datetime import date

import dagster as dg
import polars as pl

from assets.replay import replay_summary, replays
from assets.rot import rot_checks
from pipelines.demo import generate
from pipelines.demo.registry import FOLDER as DEMO_CANDIDATES
from pipelines.partitions import CANDIDATE_PARTITIONS, candidate_day_key
from pipelines.simulator import running, simulated_llm
from tests.environments import local_settings, run_stage

DAY = date(2026, 11, 21)


def test_the_long_prompt_day_reads_its_shared_prefix_from_the_cache(tmp_path):
    registry = tmp_path / "candidates"
    registry.mkdir()
    shutil.copy(DEMO_CANDIDATES / "kb-haiku.yaml", registry / "kb-haiku.yaml")
    settings = local_settings(tmp_path, candidates_uri=str(registry))
    generate(
        settings.source_uri, calls=0, days=1, seed=3, end=DAY, stores_out=settings.stores_uri, long_prompt_calls=40
    )
    instance = dg.DagsterInstance.ephemeral()
    assert run_stage(settings, "ingest", DAY.isoformat(), instance).success
    resources = settings.resources()
    assert dg.materialize([rot_checks], resources=resources, partition_key=DAY.isoformat(), instance=instance).success
    calls = settings.warehouse().read("calls").to_dicts()
    assert len(calls) == 40 and {c["service"] for c in calls} == {"support.kb"}
    first = json.loads(calls[0]["request_json"])
    assert len(first["tools"]) == 3 and len(first["system"]) > 3_500 + 6 * 2_300  # instructions + six articles

    instance.add_dynamic_partitions(CANDIDATE_PARTITIONS, ["kb-haiku"])
    with running() as sim:
        result = dg.materialize(
            [replays, replay_summary],
            resources={**resources, "llm": simulated_llm(sim)},
            partition_key=candidate_day_key("kb-haiku", DAY),
            instance=instance,
        )
    assert result.success
    meta = result.asset_materializations_for_node("replays")[0].metadata
    planned_upper, planned_cached = meta["plan_usd_first_round"].value, meta["plan_usd_first_round_with_cache"].value
    assert planned_cached < planned_upper / 2  # the plan expected the cache to pay
    ledger = settings.warehouse().read("llm_requests", pl.col("purpose") == "replay")
    by_model = {m: frame for (m,), frame in ledger.group_by("model")}
    assert set(by_model) == {"claude-sonnet-4-6", "claude-haiku-4-5-20251001"}  # baselines, candidate
    for frame in by_model.values():
        # one write per topic's prefix, then reads: above Sonnet 4.6's 1,024 and Haiku 4.5's 4,096 minimum
        assert frame["cache_read_input_tokens"].sum() > 4_096 * (frame.height - 3)
        assert (frame["cache_write_input_tokens"] > 0).sum() <= 3
    assert ledger["cost_usd"].sum() < planned_cached  # billed, with the cache, under what the plan expected
