"""Shards in the Dagster UI (``TRACELAKE_SHARDS=hour:4``), driven by Playwright in Debian's
Chromium: the partitions page of the load's ``calls`` asset shows the day x shard grid (a
column per shard), and a backfill of 2 days x 4 shards launched by clicks in the Materialize
dialog runs the 8 partitions, which then land every call of the two days."""

from __future__ import annotations

import os
import signal
import time
from datetime import date

import dagster as dg
from playwright.sync_api import sync_playwright

from pipelines.demo import generate
from tests.browser import launch
from tests.environments import local_settings
from tests.processes import dagster_dev, free_port, wait_for

START = date(2026, 11, 14)
DAYS = [date(2026, 11, 19), date(2026, 11, 20)]
SPEC = "hour:4"
SHARDS = [f"hour4-{s}" for s in range(4)]
# two runs at a time: on a loaded 2-core machine, eight launched at once time out starting
INSTANCE_YAML = "telemetry:\n  enabled: false\nconcurrency:\n  runs:\n    max_concurrent_runs: 2\n"


def test_the_day_x_shard_grid_and_a_backfill_of_two_days_by_four_shards_from_the_ui(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_YAML)
    (home / ".nux").mkdir()  # no community welcome dialog over the buttons (see tests/replay/test_ui.py)
    (home / ".nux" / "nux.yaml").write_text("seen: 1\n")
    settings = local_settings(tmp_path, shards=SPEC)
    summary = generate(settings.source_uri, calls=80, days=2, seed=5, end=DAYS[-1], stores_out=settings.stores_uri)
    by_shard = {day: settings.object_store().list_day_by_shard(day) for day in DAYS}
    assert all(len(found) == 4 for found in by_shard.values()), "the demo days have objects for the four shards"

    port = free_port()
    log = tmp_path / "dagster-dev.log"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "TRACELAKE_SOURCE": settings.source_uri,
        "TRACELAKE_WAREHOUSE": settings.warehouse_uri,
        "TRACELAKE_STORES": settings.stores_uri,
        "TRACELAKE_SHARDS": SPEC,
        "TRACELAKE_START_DATE": START.isoformat(),
        "TRACELAKE_RUN_STEPS": "in_process",  # a run's steps in its process: the UI flow is tested, not the executor
        "DAGSTER_GRPC_TIMEOUT_SECONDS": "300",  # launching a run asks the code server, slow when loaded
    }
    with open(log, "w") as out:
        process = dagster_dev(port, tmp_path, env, out)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(f"{base}/server_info", process, log)
        with sync_playwright() as playwright:
            browser = launch(playwright)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_navigation_timeout(120_000)
            # the partitions page: a list of days beside a list of shards, the grid's two dimensions
            page.goto(f"{base}/assets/calls?view=partitions")
            page.get_by_text("Materialized (").first.wait_for(timeout=120_000)
            page.get_by_placeholder("Filter by day").wait_for(timeout=30_000)
            page.get_by_placeholder("Filter by shard").wait_for(timeout=30_000)
            for shard in SHARDS:
                page.get_by_text(shard, exact=True).first.wait_for(timeout=30_000)
            page.get_by_text(str(DAYS[-1]), exact=True).first.wait_for(timeout=30_000)
            page.screenshot(path=str(tmp_path / "grid.png"))

            # Materialize...: the load is one multi-asset (Confirm its other tables), then the two
            # days typed as a range and every shard by its All button
            page.get_by_role("button", name="Materialize…").click()
            page.get_by_role("button", name="Confirm").click(timeout=60_000)
            dialog = page.get_by_role("dialog")
            dialog.get_by_role("button", name="Launch backfill").wait_for(timeout=60_000)
            days = dialog.get_by_placeholder("ex: ", exact=False)
            days.fill(f"[{DAYS[0]}...{DAYS[-1]}]")
            days.press("Enter")
            dialog.get_by_role("button", name="All", exact=True).nth(1).click()  # the shard dimension's
            dialog.get_by_text("8 partitions").wait_for(timeout=30_000)
            page.screenshot(path=str(tmp_path / "dialog.png"))
            dialog.get_by_role("button", name="Launch backfill").click()
            page.get_by_text("Created backfill").wait_for(timeout=30_000)

            # the backfill's runs, awaited through the instance with no page open (an open page
            # polls the webserver, which competes with the runs on a 2-core machine), then the
            # partitions page read once
            page.goto("about:blank")
            instance = dg.DagsterInstance.from_config(str(home))
            backfilled = {day.isoformat() for day in DAYS}
            deadline = time.monotonic() + 900  # a loaded 2-core machine launches runs slowly
            while True:
                # the days backfilled (the nightly schedule, 02:30 UTC, may add yesterday's)
                shard_runs = [r for r in instance.get_runs() if r.tags.get("dagster/partition/day") in backfilled]
                if len(shard_runs) == len(DAYS) * len(SHARDS) and all(r.is_finished for r in shard_runs):
                    break
                assert time.monotonic() < deadline, (
                    f"{len(shard_runs)} shard runs, not all finished\n{log.read_text()[-3000:]}"
                )
                time.sleep(5)
            # every shard run succeeded, the loaded tables' checks with them (Dagster runs an asset's
            # checks with it when it is materialized from its page: on the day as loaded so far)
            failed = instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
            assert not failed, [(r.job_name, r.tags.get("dagster/partition")) for r in failed]
            page.goto(f"{base}/assets/calls?view=partitions")
            page.get_by_text("Materialized (8)").wait_for(timeout=60_000)
            page.screenshot(path=str(tmp_path / "done.png"))
            browser.close()
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    calls = settings.warehouse().read("calls")
    assert calls.height == summary.calls
    by_day = dict(calls.group_by("occurred_date").len().iter_rows())
    assert set(by_day) == set(DAYS) and all(n > 0 for n in by_day.values())
    assert calls["call_id"].n_unique() == calls.height
