"""Every environment variable tracelake reads is in the README's configuration table."""

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_the_readme_lists_every_variable_the_code_reads():
    code = "\n".join(p.read_text() for base in ("pipelines", "assets") for p in (ROOT / base).rglob("*.py"))
    read = set(re.findall(r"[\"']((?:TRACELAKE|ANTHROPIC|AWS|CLOUD_ML|DAGSTER)_[A-Z_]+)[\"']", code))
    readme = ROOT.joinpath("README.md").read_text()
    section = readme[readme.index("## Pointing it at a real bucket") :]
    table = section[: section.index("\n\n", section.index("| variable |"))]
    listed = set(re.findall(r"`([A-Z][A-Z_]+)`", table))
    # names the code uses that are not settings: Dagster's own tags and internals, the SDK's telemetry switches
    internal = {n for n in read if n.startswith("DAGSTER_") and n != "DAGSTER_HOME"}
    internal |= {n for n in read if n.startswith("ANTHROPIC_OPEN_TELEMETRY")}
    internal |= {"AWS_ALLOW_HTTP"}  # a delta-rs storage option the warehouse sets for an http:// endpoint
    assert read - internal - listed == set(), "add these to the README's configuration table"
