"""Planted-error agent sessions, ingested once per module by the real ingest stage."""

from __future__ import annotations

import dagster as dg
import pytest

from pipelines.judge.timeline import build_traces
from tests.environments import local_settings, run_stage
from tests.judge.sessions import (
    DAY,
    clean_sessions,
    injection_sessions,
    planted_sessions,
    violating_sessions,
    write_log,
)


@pytest.fixture(scope="session")
def ingested(tmp_path_factory):
    """Settings whose warehouse holds the fixture sessions of DAY, ingested."""
    tmp = tmp_path_factory.mktemp("judge")
    settings = local_settings(tmp)
    sessions = [*clean_sessions(), *(s for s, _, _ in planted_sessions().values())]
    sessions += [s for s, _, _ in violating_sessions().values()]
    sessions += [s for s, _ in injection_sessions().values()]
    write_log(tmp / "source", sessions)
    with dg.instance_for_test() as instance:
        assert run_stage(settings, "ingest", DAY.date().isoformat(), instance).success
    return settings


@pytest.fixture(scope="session")
def traces(ingested):
    warehouse = ingested.warehouse()
    return {t.trace_id: t for t in build_traces(warehouse.read("spans").to_dicts(), warehouse.read("calls").to_dicts())}
