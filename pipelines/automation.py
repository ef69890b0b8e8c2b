"""When the daily stages of a day start: declarative automation on the assets.

The raw-trace load is day x shard (pipelines/partitions.py); everything after it is
daily and depends on every shard of its day. Two conditions, evaluated by the
``daily_stages`` automation sensor (pipelines/sensors.py):

- ``after_inputs``, on ``traces`` and on every check of the daily assets: a dependency
  was updated since this ran, and no dependency partition is missing, running or
  failed. So traces (and the loaded tables' checks) follow the load of a day once
  every shard of it is in, whoever loaded it: the source sensor, a backfill, a click.
- ``after_nightly_load``, on the other daily stages (retention, rot, judge): a shard of
  the day was loaded by a run of the nightly schedule (``NIGHTLY_TAG``) since the asset
  last ran, and every shard, and what the asset reads, is in. They run once a night, in
  the same run as traces (assets requested in one evaluation for one day form one run).

The conditions sit on the assets rather than on the ``ingest`` and ``nightly`` jobs:
those stay plain jobs that the UI can subset and re-execute from failure (a job-level
condition makes Dagster 1.13 refuse both: dagster-io/dagster#34213).
"""

from __future__ import annotations

import dagster as dg

AC = dg.AutomationCondition

# on the shard runs the nightly schedule launches: the day's other stages follow them
NIGHTLY_TAG = "tracelake/nightly"


def not_in() -> dg.AutomationCondition:
    """A partition that is not in: running, or missing or its last run failed (and not
    requested again in this evaluation)."""
    return (((AC.missing() | AC.execution_failed()) & ~AC.will_be_requested()) | AC.in_progress()).with_label(
        "missing, running or failed"
    )


def after_inputs() -> dg.AutomationCondition:
    """A dependency updated since this ran, every dependency partition (every shard of the day) in."""
    return (
        AC.any_deps_updated().since_last_handled()
        & ~AC.any_deps_match(not_in()).with_label("a dependency is not in")
        & ~AC.in_progress()
    ).with_label("after its inputs")


def after_nightly_load() -> dg.AutomationCondition:
    """Since this ran, a shard of the day was loaded by the nightly schedule (directly upstream,
    or one asset further: judge_calibration reads only traces); every shard and every input is in."""
    nightly = (AC.newly_updated() & AC.any_new_update_has_run_tags(tag_keys={NIGHTLY_TAG})).with_label(
        "loaded by the nightly schedule"
    )
    loaded = AC.any_deps_match(nightly) | AC.any_deps_match(AC.any_deps_match(nightly))
    waiting = AC.any_deps_match(not_in() | AC.any_deps_match(not_in())).with_label("an input is not in")
    return (loaded.since_last_handled() & ~waiting & ~AC.in_progress()).with_label("after the nightly load")
