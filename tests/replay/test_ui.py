"""The Dagster UI, started by the test in its own process group, driven by
Playwright in Debian's Chromium, as a person deciding on a prompt change uses it:
a candidate file added to the registry shows up as a partition (a bad file fails
the sensor's tick with the file and the reason), a 3-day backfill of `replays` is
launched by clicks with no run config, and the page itself says the candidate
hides a regression: the failing warn check, the pooled 3-day table with
intervals, the plot link, what the run spent apart from what the rows cost. A
second backfill sends nothing and leaves the summary alone. A partition added by
hand is removed by the registry's sensor. Screenshots land in
.tracelake/artifacts/test_ui/ (the `make ui` screenshot of the README is one)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import dagster as dg
from playwright.sync_api import Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from assets.replay import replay_automation
from assets.rot import rot_checks
from pipelines.demo import generate
from pipelines.demo.registry import FOLDER as DEMO_CANDIDATES
from pipelines.maintenance import BOOKKEEPING
from pipelines.partitions import CANDIDATE_PARTITIONS
from pipelines.resources.warehouse import Warehouse
from pipelines.simulator import running
from tests.browser import launch
from tests.environments import local_settings, run_stage
from tests.processes import dagster_dev, free_port, wait_for
from tests.sensor_ticks import evaluations_since

IN_PROGRESS = (
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
)
LAST = date(2026, 11, 20)
CANDIDATE = "support-answer-v4"
# 400 calls a day with the demo's seed: enough long English support answers for the
# pooled window to show the regression the improving aggregate hides
CALLS, SEED = 400, 7
ARTIFACTS = Path(__file__).resolve().parents[2] / ".tracelake" / "artifacts" / "test_ui"
BROKEN = "version: 1\nid: broken-idea\ndescription: a typo in a key\nmodle: claude-sonnet-4-6\n"
DAYS = [LAST - timedelta(days=2), LAST - timedelta(days=1), LAST]
INSTANCE_YAML = "telemetry:\n  enabled: false\n"


def shows(page: Page, text: str, timeout: float = 90_000) -> None:
    """Wait until the page's visible text contains ``text`` (the UI renders after it loads),
    looking twice a second: Playwright's default, every animation frame, lays the whole page
    out sixty times a second for as long as it waits."""
    page.wait_for_function("t => document.body.innerText.includes(t)", arg=text, timeout=timeout, polling=500)


def until_shown(page: Page, url: str, text: str, seconds: float) -> None:
    """Reload ``url`` until it shows ``text`` (what the page reads may land a moment after the runs)."""
    deadline = time.monotonic() + seconds
    while True:
        page.goto(url)
        try:
            shows(page, text, timeout=30_000)
            return
        except PlaywrightTimeout:
            assert time.monotonic() < deadline, f"{url} never showed {text!r}:\n{page.inner_text('body')[-2000:]}"
            page.wait_for_timeout(5_000)


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def launch_backfill(page: Page, base: str) -> None:
    """Materialize... on `replays`: the candidate and the three days, by clicks; no run config."""
    open_backfill_dialog(page, base, CANDIDATE)
    dialog = page.get_by_role("dialog")
    days = dialog.get_by_placeholder("ex: ", exact=False)
    days.fill(f"[{DAYS[0]}...{DAYS[-1]}]")
    days.press("Enter")
    dialog.get_by_text("3 partitions").wait_for()
    shot(page, "backfill-dialog")
    dialog.get_by_role("button", name="Launch backfill").click()
    page.get_by_text("Created backfill").wait_for(timeout=30_000)


def backfill_runs(instance: dg.DagsterInstance) -> dict[str, list[dg.DagsterRun]]:
    """The candidate's runs by the backfill a person launched (the automation's own are left out)."""
    runs = instance.get_runs(dg.RunsFilter(tags={"dagster/partition/candidate": CANDIDATE}))
    by: dict[str, list[dg.DagsterRun]] = {}
    for run in runs:
        if "dagster/backfill" in run.tags and "dagster/auto_materialize" not in run.tags:
            by.setdefault(run.tags["dagster/backfill"], []).append(run)
    return by


def candidate_runs_busy(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    """The candidate's runs not finished yet: queued, starting or running (the summaries' too)."""
    return instance.get_runs(dg.RunsFilter(tags={"dagster/partition/candidate": CANDIDATE}, statuses=list(IN_PROGRESS)))


def settled(instance: dg.DagsterInstance, backfill: str, seconds: float) -> None:
    """Wait until the backfill's three runs succeeded and no run of the candidate is left (the summaries)."""
    deadline = time.monotonic() + seconds
    while True:
        runs = backfill_runs(instance).get(backfill, [])
        ok = len(runs) == 3 and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
        busy = candidate_runs_busy(instance)
        if ok and not busy:
            return
        assert time.monotonic() < deadline, f"backfill {backfill}: {[r.status for r in runs]}, {len(busy)} running"
        time.sleep(5)


def summaries_by_run(instance: dg.DagsterInstance) -> list[tuple[str | None, str]]:
    """Every replay_summary materialization as (partition, run id), oldest first."""
    records = instance.fetch_materializations(dg.AssetKey("replay_summary"), limit=1000, ascending=True).records
    return [(r.partition_key, r.run_id) for r in records]


def every_day_summarized(instance: dg.DagsterInstance, seconds: float) -> list[tuple[str | None, str]]:
    """Wait until each day has its summary: the automation sensor requests them on its own ticks
    (every 30 s), so the backfill's runs can be done while some days' summaries are not yet asked for."""
    deadline = time.monotonic() + seconds
    while True:
        summaries = summaries_by_run(instance)
        days = {key.split("|")[-1] for key, _ in summaries if key}
        busy = candidate_runs_busy(instance)
        if days >= {d.isoformat() for d in DAYS} and not busy:
            return summaries
        assert time.monotonic() < deadline, f"summaries after the backfill: {summaries}, {len(busy)} runs busy"
        time.sleep(5)


def runs_created_since(instance: dg.DagsterInstance, since: float) -> list[dg.DagsterRun]:
    """The candidate's runs created after ``since`` (a Unix time), the automation's included."""
    after = datetime.fromtimestamp(since, tz=UTC)
    return instance.get_runs(dg.RunsFilter(tags={"dagster/partition/candidate": CANDIDATE}, created_after=after))


def data_version(warehouse: Warehouse, table: str) -> int:
    """The table's last version that wrote rows: the maintenance schedule (06:30 UTC, running
    in `dagster dev` as in production) may compact it and set its properties mid-test."""
    for commit in warehouse.table(table).history():  # newest first
        if commit["operation"] not in {*BOOKKEEPING, "OPTIMIZE"}:
            return commit["version"]
    raise AssertionError(f"{table} has no commit that wrote rows")


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


def test_decide_on_a_candidate_from_the_ui(tmp_path):
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
    generate(settings.source_uri, calls=CALLS, days=3, seed=SEED, end=LAST, stores_out=settings.stores_uri)
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
            "TRACELAKE_RUN_STEPS": "in_process",  # steps in the run's process: the UI is tested, not the executor
        }
        process = dagster_dev(port, tmp_path, env, out)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for(f"{base}/server_info", process, log)
            # a person registers a candidate: a new file in the registry; someone else's has a typo
            shutil.copy(DEMO_CANDIDATES / f"{CANDIDATE}.yaml", registry / f"{CANDIDATE}.yaml")
            (registry / "broken-idea.yaml").write_text(BROKEN)
            with sync_playwright() as playwright:
                browser = launch(playwright)
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                launch_backfill(page, base)
                first = time.monotonic()

                # the rejected file: a failed tick of the registry's sensor, with the file and the reason
                until_shown(
                    page, f"{base}/locations/pipelines.definitions/sensors/candidate_partitions_sync", "Failure", 180
                )
                page.get_by_role("button", name="View", exact=True).first.click()
                dialog = page.get_by_role("dialog")
                dialog.get_by_text("broken-idea.yaml", exact=False).first.wait_for()
                assert "key modle: Extra inputs are not permitted" in dialog.inner_text()
                shot(page, "rejected-candidate-file")
                page.keyboard.press("Escape")

                # the backfill's runs and the three summaries, awaited through the instance; the
                # pages are read once they are in (a page reloaded while runs go on competes with them)
                deadline = time.monotonic() + 120
                while not backfill_runs(instance):
                    assert time.monotonic() < deadline, "the backfill started no run"
                    time.sleep(2)
                (done,) = backfill_runs(instance)
                settled(instance, done, 1200)
                summaries = every_day_summarized(instance, 300)
                assert len(summaries) == len(DAYS), f"one summary per day: {summaries}"

                # the verdict, read from the page: replay_summary pooled over the three days
                until_shown(page, f"{base}/assets/replay_summary?view=events", f"{DAYS[0]}..{DAYS[-1]} (3 days)", 120)
                events = page.inner_text("body")
                assert "DO NOT SHIP as is: the aggregate improves but hides significant regressions in" in events
                assert "window_segments" in events and "HIDES A REGRESSION" in events
                assert re.search(r"support\.answer/en/\w+/long.*\[[-+]\d\.\d\d, [-+]\d\.\d\d\]", events), "an interval"
                assert re.search(r"candidate \$0\.\d+ vs baseline \$0\.\d+ per call", events)
                plot = page.locator('a[href^="file://"][href$="/reports/replay/support-answer-v4.png"]').first
                plot.wait_for()
                assert Path(plot.get_attribute("href").removeprefix("file://")).read_bytes()[:4] == b"\x89PNG"
                shot(page, "replay-summary-window")

                check = f"{base}/assets/replay_summary?view=checks&checkDetail=aggregate_hides_a_segment_regression"
                until_shown(page, check, "while these segments significantly regress: support.answer/en/", 120)
                assert "This is a non-blocking asset check" in page.inner_text("body")
                shows(page, "Failed")
                shot(page, "hides-a-regression-check")

                until_shown(page, f"{base}/assets/replays?view=events", "spent_this_run_usd", 120)
                spent = page.inner_text("body")
                assert re.search(r"\d+ sent, \$0\.\d{4} spent; \d+ rows committed", spent), spent[:3000]
                assert "cost_of_rows_usd" in spent
                shot(page, "replays-spent-this-run")
                print(f"first backfill read from the page in {time.monotonic() - first:.0f}s")

                # a second backfill of the same days
                version = data_version(settings.warehouse(), "replay_summary")
                launch_backfill(page, base)
                deadline = time.monotonic() + 60
                while not (second := [b for b in backfill_runs(instance) if b != done]):
                    assert time.monotonic() < deadline, "the second backfill started no run"
                    time.sleep(2)
                settled(instance, second[0], 900)
                quiet_since = time.time()  # the re-run's runs are done: from here, nothing is to be asked for
                until_shown(
                    page,
                    f"{base}/assets/replays?view=events",
                    "0 sent, $0.0000 spent; nothing committed (answered from the ledger)",
                    120,
                )
                shot(page, "replays-rerun-sent-nothing")
                # "Add a partition" in the Materialize dialog: the registry's sensor takes it away,
                # while the automation sensor evaluates twice after the re-run and asks for no summary
                instance.add_dynamic_partitions(CANDIDATE_PARTITIONS, ["gpt-next"])
                deadline = time.monotonic() + 300
                looked_twice = lambda: evaluations_since(instance, replay_automation.name, quiet_since) >= 2  # noqa: E731
                while not looked_twice() or instance.has_dynamic_partition(CANDIDATE_PARTITIONS, "gpt-next"):
                    assert time.monotonic() < deadline, "no two automation evaluations, or the phantom partition stayed"
                    time.sleep(5)
                assert runs_created_since(instance, quiet_since) == [], "a re-run that changed nothing asked for runs"
                assert summaries_by_run(instance) == summaries, "a re-run that changed nothing summarized again"
                assert data_version(settings.warehouse(), "replay_summary") == version
                browser.close()
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)

        assert sim.bills, "the runs the UI launched talked to the simulator"
