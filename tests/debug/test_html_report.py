"""`tracelake show --html` on a hostile trace, opened in Debian's Chromium
(Playwright): no script runs, no request leaves the file, and the hostile
content is still there, as text."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import sync_playwright

from tests.browser import launch
from tests.debug.conftest import HOSTILE_TRACE, hostile_text


def test_hostile_trace_renders_as_text_with_no_script_and_no_request(run, demo_day, tmp_path):
    report = tmp_path / "run.html"
    assert "no script, no external requests" in run("show", HOSTILE_TRACE, "--html", "-o", str(report))
    html = report.read_text()
    assert '<meta http-equiv="Content-Security-Policy"' in html
    assert "<script" not in html and "javascript:" in html  # the link's text is there, escaped
    assert html.index("Content-Security-Policy") < html.index("<style>")

    url = Path(report).resolve().as_uri()
    requests, dialogs, console, errors = [], [], [], []
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on("console", lambda m: console.append(m.text))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url, wait_until="load")
            page.wait_for_timeout(300)  # let a delayed handler or refresh fire, if one could
            pwned = page.evaluate("() => window.__pwned === undefined ? null : String(window.__pwned)")
            injected = page.evaluate(
                "() => document.querySelectorAll('script, img, iframe, svg, base, link, a, meta[http-equiv=refresh]')"
                ".length"
            )
            csp = page.evaluate("() => document.querySelector('meta[http-equiv=Content-Security-Policy]').content")
            body = page.inner_text("body")
            longest = page.evaluate(
                "() => Math.max(...[...document.querySelectorAll('pre')].map(p => p.textContent.length))"
            )
            final_url = page.url
        finally:
            browser.close()

    assert csp.startswith("default-src 'none'; style-src 'sha256-")
    assert requests == [url], "the report must make no request beyond loading itself"
    assert pwned is None and dialogs == [] and errors == []
    assert not any("pwned" in m for m in console)
    assert injected == 0, "hostile markup must not become elements"
    assert final_url == url  # no meta refresh took the page anywhere
    base = "http://127.0.0.1:9"
    for piece in ("<script>window.__pwned = 'script'; alert(1)</script>", "onerror=", "javascript:window.__pwned",
                  f"url({base}/bg.png)", f"<link rel=\"stylesheet\" href=\"{base}/sheet.css\">"):  # fmt: skip
        assert piece in body, piece
    assert hostile_text(base)[:60] in body
    assert demo_day.hostile_marker in body and longest > 1_000_000  # the 1 MB line, whole
