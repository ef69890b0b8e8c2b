"""A small recorded day (demo traces, ingested, rot-checked) and the LLM simulator
over real HTTP on loopback, shared by the replay tests of a module."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import dagster as dg
import pytest

from assets.replay import replay_summary, replays
from assets.rot import rot_checks
from pipelines.demo import generate
from pipelines.demo.registry import FOLDER as DEMO_CANDIDATES
from pipelines.partitions import CANDIDATE_PARTITIONS, candidate_day_key
from pipelines.settings import Settings
from pipelines.simulator import Simulator, running, simulated_llm
from tests.environments import local_settings, run_stage

DAY = date(2026, 11, 20)
CALLS = 60


@dataclasses.dataclass
class RecordedDay:
    settings: Settings
    instance: dg.DagsterInstance
    registry: Path

    def add_candidate(self, slug: str, text: str | None = None) -> None:
        """Put a candidate file in the registry (the demo's when no text) and its partition in the instance."""
        target = self.registry / f"{slug}.yaml"
        if text is None:
            shutil.copy(DEMO_CANDIDATES / f"{slug}.yaml", target)
        else:
            target.write_text(text)
        if not self.instance.has_dynamic_partition(CANDIDATE_PARTITIONS, slug):
            self.instance.add_dynamic_partitions(CANDIDATE_PARTITIONS, [slug])

    def replay(self, sim: Simulator, slug: str, day: date = DAY, **llm):
        resources = {**self.settings.resources(), "llm": simulated_llm(sim, **llm)}
        return dg.materialize(
            [replays, replay_summary],
            resources=resources,
            partition_key=candidate_day_key(slug, day),
            instance=self.instance,
        )


@pytest.fixture(scope="module")
def recorded_day(tmp_path_factory) -> RecordedDay:
    tmp = tmp_path_factory.mktemp("replay")
    registry = tmp / "candidates"
    registry.mkdir()
    settings = local_settings(tmp, candidates_uri=str(registry))
    generate(settings.source_uri, calls=CALLS, days=1, seed=11, end=DAY, stores_out=settings.stores_uri)
    instance = dg.DagsterInstance.ephemeral()
    assert run_stage(settings, "ingest", DAY.isoformat(), instance).success
    assert dg.materialize(
        [rot_checks], resources=settings.resources(), partition_key=DAY.isoformat(), instance=instance
    ).success
    return RecordedDay(settings, instance, registry)


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with running() as simulator:
        yield simulator


def cli_env(recorded_day: RecordedDay, sim: Simulator, tmp_path: Path, monkeypatch) -> dict[str, str]:
    """The environment `tracelake` commands see: the recorded day's settings, the simulator,
    DAGSTER_HOME under ``tmp_path``, which is the working directory (reports land under it)."""
    settings = recorded_day.settings
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dagster").mkdir()
    return {
        "TRACELAKE_SOURCE": settings.source_uri,
        "TRACELAKE_WAREHOUSE": settings.warehouse_uri,
        "TRACELAKE_STORES": settings.stores_uri,
        "TRACELAKE_CANDIDATES": str(recorded_day.registry),
        "DAGSTER_HOME": str(tmp_path / "dagster"),
        "COLUMNS": "200",
        **sim.env(),
    }
