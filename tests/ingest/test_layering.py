"""The core imports no framework and no stage imports in a circle: the layering the
architecture document promises (docs/architecture.md)."""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
# the core: every stage's pure code, the record layer, storage without its resource
CORE = (
    "pipelines.record.schema", "pipelines.record.canonical", "pipelines.record.dictionary", "pipelines.delta",
    "pipelines.ingest.objects", "pipelines.ingest.plan", "pipelines.ingest.quality", "pipelines.formats",
    "pipelines.redact.redactor", "pipelines.debug.investigation",
    "pipelines.retention.erasure", "pipelines.retention.sweep", "pipelines.rot.check", "pipelines.rot.grouped",
    "pipelines.judge.day", "pipelines.replay.day", "pipelines.debug.tables", "pipelines.llm.runner",
    "pipelines.simulator", "pipelines.demo", "pipelines.capture", "pipelines.ingest.traces", "pipelines.query",
    "pipelines.ingest.shards", "pipelines.maintenance", "pipelines.migration.rewrite",
)  # fmt: skip


def test_the_core_imports_no_dagster():
    loaded = "sorted(m for m in sys.modules if m.split('.')[0] == 'dagster')[:3]"
    code = f"import sys\nfor m in {CORE!r}: __import__(m)\nprint({loaded})"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"the core pulls in dagster: {done.stdout}"


def _graph() -> dict[str, set[str]]:
    modules = {}
    for base in ("pipelines", "assets"):
        for path in (ROOT / base).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            modules[name] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # `from package import submodule` needs the submodule; `from module import name` the module
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
                wanted = subs if len(subs) == len(node.names) else [node.module, *subs]
            elif isinstance(node, ast.Import):
                wanted = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {w for w in wanted if w in modules and w != name}
    return graph


def test_no_module_imports_in_a_circle():
    circle: list[str] = []
    try:
        graphlib.TopologicalSorter(_graph()).prepare()
    except graphlib.CycleError as error:
        circle = error.args[1]
    assert circle == [], f"modules import each other in a circle: {' -> '.join(circle)}"


def test_the_record_layer_imports_no_stage():
    graph = _graph()
    record = {name for name in graph if name.startswith("pipelines.record")}
    outside = {dep for name in record for dep in graph[name] if not dep.startswith("pipelines.record")}
    assert outside == set()


def test_the_command_line_imports_only_what_a_command_needs():
    """`tracelake find`, `show` and `sql` answer fast: loading the CLI (every command registered)
    imports no framework and no data library; each command imports its own when it runs."""
    heavy = ("dagster", "polars", "pyarrow", "presidio_analyzer", "spacy", "anthropic", "statsmodels", "deltalake")
    code = f"import sys\nimport pipelines.cli\nprint(sorted(m for m in {heavy!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"loading the CLI imports {done.stdout.strip()}"


def test_loading_the_code_location_imports_no_llm_sdk_no_statistics_and_no_nlp():
    """Every run worker, code server and shard pod loads the whole code location before it
    does anything: the anthropic SDK (1.8 s here), statsmodels with scipy (1.2 s) and
    Presidio with spaCy (1.5 s) load in the runs that send a request, compute a rate or
    redact, not in every one (bench/startup.py)."""
    heavy = ("anthropic", "statsmodels", "scipy", "presidio_analyzer", "spacy")
    code = f"import sys\nimport pipelines.definitions\nprint(sorted(m for m in {heavy!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"loading the code location imports {done.stdout.strip()}"
