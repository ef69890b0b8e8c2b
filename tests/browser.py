"""Debian's Chromium, driven by Playwright, for the UI and HTML report tests.

Playwright's own browser download cannot work offline: tests launch
/usr/bin/chromium (`.ci/run` installs it). The flags keep it headless and
stop its background connections, which this machine's closed network refuses.
"""

from __future__ import annotations

from playwright.sync_api import Browser, Playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launch(playwright: Playwright) -> Browser:
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
