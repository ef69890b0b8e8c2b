"""When the daily stages of a day start: declarative automation on the assets.

The raw-trace load is day x shard (pipelines/partitions.py); everything after it is
daily and depends on every shard of its day. Three conditions, evaluated by the
``daily_stages`` automation sensor (pipelines/sensors.py):

- ``after_load``, on ``traces`` and the loaded tables' checks: a loaded table was updated
  since this ran, and no shard of the day is missing, running or failed. So they follow
  the load of a day once every shard of it is in, whoever loaded it: the source sensor, a
  backfill, a click. ``after_inputs`` is the same for the checks of the daily assets.
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


def since_handled(trigger: dg.AutomationCondition) -> dg.AutomationCondition:
    """``trigger`` became true since this was last requested. Dagster's ``since_last_handled``
    also resets when the asset is updated, and lets the reset win when both fall between two
    evaluations: a load landing while the day's run was being requested or finishing was then
    never handled, and the day's stages never ran on it. Here a load after the last request
    always gets a run (once the running one ended); every stage is idempotent."""
    handled = (AC.newly_requested() & ~trigger) | AC.initial_evaluation()
    return trigger.since(handled.with_label("requested"))


def after_load() -> dg.AutomationCondition:
    """A loaded table of the day was updated since this ran (the load is its own job, so never in
    this asset's run), and every shard of the day is in. For traces and the loaded tables' checks."""
    return (
        since_handled(AC.any_deps_updated())
        & ~AC.any_deps_match(not_in()).with_label("a dependency is not in")
        & ~AC.in_progress()
    ).with_label("after the load")


def after_inputs() -> dg.AutomationCondition:
    """A dependency updated since this ran, and every dependency partition in. For the checks of the
    daily assets, whose dependency is usually updated in their own run: there the dependency's update
    and the check's must not start another run, so Dagster's own ``since_last_handled``."""
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
    return (since_handled(loaded) & ~waiting & ~AC.in_progress()).with_label("after the nightly load")
