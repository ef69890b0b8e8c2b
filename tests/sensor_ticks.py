"""A sensor's evaluations as the instance records them (its ticks), for tests that wait for
the daemon to have looked again rather than sleep a fixed time."""

from __future__ import annotations

import dagster as dg
from dagster._core.scheduler.instigation import InstigatorType, TickStatus


def evaluations_since(instance: dg.DagsterInstance, sensor: str, since: float) -> int:
    """Evaluations of ``sensor`` begun after ``since`` (a Unix time) and ended; 0 before its first."""
    states = [
        s for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR) if s.instigator_name == sensor
    ]
    if not states:
        return 0
    ticks = instance.get_ticks(states[0].instigator_origin_id, states[0].selector_id, after=since)
    return sum(tick.status in (TickStatus.SUCCESS, TickStatus.SKIPPED) for tick in ticks)
