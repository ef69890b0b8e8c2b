"""The Dagster UI, started by the test in its own process group, driven by
Playwright in Debian's Chromium: a candidate added to the registry shows up as a
partition, a 3-day backfill of `replays` is launched by clicks with no run
config, and `replay_summary` materializes for the three days."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from playwright.sync_api import Page, sync_playwright

from assets.rot import rot_checks
from pipelines.demo import generate
from pipelines.demo.registry import FOLDER as DEMO_CANDIDATES
from pipelines.simulator import running
from tests.browser import launch
from tests.environments import local_settings, run_stage

LAST = date(2026, 11, 20)
DAYS = [LAST - timedelta(days=2), LAST - timedelta(days=1), LAST]
INSTANCE_YAML = "telemetry:\n  enabled: false\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, process: subprocess.Popen, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"dagster dev exited early:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail(f"the Dagster UI did not answer at {url}:\n{log.read_text()[-3000:]}")


def open_backfill_dialog(page: Page, base: str, candidate: str) -> None:
    """Open Materialize... on `replays` until the candidate partition is there (the sensor syncs it)."""
    deadline = time.monotonic() + 120
    while True:
        page.goto(f"{base}/assets/replays")
        page.get_by_role("button", name="Materialize…").wait_for(timeout=60_000)
        page.get_by_role("button", name="Materialize…").click()
        page.wait_for_timeout(1000)
        if page.get_by_role("button", name="Confirm").count():  # upstream days never materialized here
            page.get_by_role("button", name="Confirm").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_text("Select a partition or create one").first.click()
        page.get_by_placeholder("Filter partitions").fill(candidate)
        page.wait_for_timeout(500)
        if page.get_by_text("Select all (1)").count():
            page.get_by_text("Select all (1)").click()
            page.keyboard.press("Escape")
            return
        assert time.monotonic() < deadline, f"candidate {candidate} never appeared as a partition"
        page.keyboard.press("Escape")
        page.wait_for_timeout(5000)


def test_backfill_a_new_candidate_over_three_days_from_the_ui(tmp_path):
    registry = tmp_path / "candidates"
    registry.mkdir()
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_YAML)
    # The UI's community welcome dialog opens a second or more after a page loads on
    # localhost and covers every button; Dagster skips it once this file exists
    # (dagster._core.nux), so the test does not race it.
    (home / ".nux").mkdir()
    (home / ".nux" / "nux.yaml").write_text("seen: 1\n")
    settings = local_settings(tmp_path, candidates_uri=str(registry))
    generate(settings.source_uri, calls=20, days=3, seed=5, end=LAST, stores_out=settings.stores_uri)
    instance = dg.DagsterInstance.from_config(str(home))
    for day in DAYS:
        assert run_stage(settings, "ingest", day.isoformat(), instance).success
        assert dg.materialize(
            [rot_checks], resources=settings.resources(), partition_key=day.isoformat(), instance=instance
        ).success

    port = free_port()
    log = tmp_path / "dagster-dev.log"
    with running() as sim, open(log, "w") as out:
        env = {
            **os.environ,
            **sim.env(),
            "DAGSTER_HOME": str(home),
            "TRACELAKE_SOURCE": settings.source_uri,
            "TRACELAKE_WAREHOUSE": settings.warehouse_uri,
            "TRACELAKE_STORES": settings.stores_uri,
            "TRACELAKE_CANDIDATES": str(registry),
        }
        dagster = str(Path(sys.executable).with_name("dagster"))
        process = subprocess.Popen(
            [dagster, "dev", "-m", "pipelines.definitions", "-h", "127.0.0.1", "-p", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: dagster dev ignores SIGTERM for a while
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for(f"{base}/server_info", process, log)
            # a person adds a candidate: a new file in the registry
            shutil.copy(DEMO_CANDIDATES / "sonnet-next.yaml", registry / "sonnet-next.yaml")
            with sync_playwright() as playwright:
                browser = launch(playwright)
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                open_backfill_dialog(page, base, "sonnet-next")
                dialog = page.get_by_role("dialog")
                days = dialog.get_by_placeholder("ex: ", exact=False)
                days.fill(f"[{DAYS[0]}...{DAYS[-1]}]")
                days.press("Enter")
                dialog.get_by_text("3 partitions").wait_for()
                dialog.get_by_role("button", name="Launch backfill").click()
                page.get_by_text("Created backfill").wait_for(timeout=30_000)

                deadline = time.monotonic() + 900  # a loaded 2-core machine launches runs slowly
                while not page.get_by_text("Materialized (3)").count():
                    assert time.monotonic() < deadline, "replay_summary did not materialize for the 3 days"
                    page.wait_for_timeout(10_000)
                    page.goto(f"{base}/assets/replay_summary?view=partitions")
                    page.get_by_text("Materialized (").first.wait_for(timeout=60_000)
                browser.close()
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)

        warehouse = settings.warehouse()
        summary = warehouse.read("replay_summary", pl.col("candidate") == "sonnet-next")
        assert sorted(set(summary["day"])) == DAYS
        replays = warehouse.read("replays", pl.col("candidate") == "sonnet-next")
        assert replays.height > 0 and replays["simulated"].all()
        assert sim.bills, "the runs the UI launched talked to the simulator"
