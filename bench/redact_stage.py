"""The redaction stage of one tracelake tree, for bench/redact.py (run as a subprocess).

    python bench/redact_stage.py TREE WORK.pickle OUT.json

TREE holds ``pipelines/``: this checkout, or the baseline commit's as ``git
archive`` extracted it. It goes first on ``sys.path``, so what runs is that
tree's code (spawned workers inherit the path), started cold. WORK.pickle holds what the bench
prepared: the day's rows, the labelled corpora's rows, the settings. The
stage is the bench's: ``Redactor.redact_rows``, then the pre-write screen
(``residual.scan`` of the Arrow tables about to be written); a redactor whose
``redact_rows`` takes ``screen`` (before issue 32) runs the screen itself on the
rows it makes (the text columns in its workers) and reports the screen's
CPU-seconds in its stats. CPU-seconds are this process's and its workers'. With the environment variable
``TRACELAKE_BENCH_NER_EVERYWHERE=1``: the redactor the issue measured, NER reading every system prompt, templated or
not (what the code did before commit 1e37f78).
"""

from __future__ import annotations

import inspect
import json
import os
import pickle
import resource
import sys
import time
from pathlib import Path

# Set by bench/redact.py for --ner-everywhere. Module level, not in main():
# spawned workers import this module too (as __mp_main__, the tree already on
# their path), so the patch reaches the redactors that do the work.
NER_EVERYWHERE = "TRACELAKE_BENCH_NER_EVERYWHERE"
if os.environ.get(NER_EVERYWHERE) == "1" and __name__ != "__main__":
    from pipelines.redact.redactor import Redactor as _Redactor

    _Redactor._walker_for = lambda self, call: self.walker


def template_lookup(redactor_class: type, store: dict) -> dict:
    """``templates=`` for a redactor that looks a call's template up (given the store ingest
    gives it); nothing for one that does not (the baseline commit's)."""
    if "templates" not in inspect.signature(redactor_class).parameters:
        return {}
    return {"templates": lambda template_id, version: store.get((template_id, version))}


def _cpu_seconds() -> float:
    """CPU-seconds of this process and of its children that have exited (the workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    tree, work_file, out_file = sys.argv[1:4]
    sys.path.insert(0, tree)
    if os.environ.get(NER_EVERYWHERE) == "1":
        from pipelines.redact.redactor import Redactor as _Redactor

        _Redactor._walker_for = lambda self, call: self.walker
    from pipelines.redact.keys import KeyRing
    from pipelines.redact.policy import load_policy
    from pipelines.redact.redactor import Redactor
    from pipelines.redact.residual import PATTERNS

    work = pickle.loads(Path(work_file).read_bytes())
    policy = load_policy()
    keys = KeyRing.from_secrets(*work["keys"])
    calls, spans = work["day"]
    # a redactor that screens the rows it makes (the text columns in its workers) is asked to
    in_redactor = "screen" in inspect.signature(Redactor.redact_rows).parameters
    looks_up = template_lookup(Redactor, work["templates"])
    t = time.perf_counter()
    cpu = _cpu_seconds()
    with Redactor(policy, work["mode"], keys, work["workers"], ner=work["ner"], **looks_up) as redactor:
        if in_redactor:
            result = redactor.redact_rows(calls, spans, screen=PATTERNS)
        else:
            result = redactor.redact_rows(calls, spans)
    redact_s = time.perf_counter() - t
    if in_redactor:
        t, screen_cpu = time.perf_counter(), time.process_time()
        held = sum(map(bool, [*result.residuals["calls"], *result.residuals["spans"]]))
    else:  # the scan of the tables about to be written, apart from the redactor
        from pipelines.record.rows import from_columns
        from pipelines.record.schema import TABLES
        from pipelines.redact.residual import scan

        # ingest converts the rows for its writes in either design: the conversion is not the screen's
        tables = {t: from_columns(rows, TABLES[t]) for t, rows in (("calls", result.calls), ("spans", result.spans))}
        tables["redaction_audit"] = from_columns(result.audit, TABLES["redaction_audit"])
        t, screen_cpu = time.perf_counter(), time.process_time()
        held = sum(len(scan(data, name, policy)) for name, data in tables.items())
    screen_s = time.perf_counter() - t
    screen_cpu_s = time.process_time() - screen_cpu + result.stats.get("screen_cpu_ms", 0) / 1000
    stage_cpu_s = _cpu_seconds() - cpu  # the workers have exited: their CPU is counted
    corpora = {}
    with Redactor(policy, "placeholder", keys, 1, ner=work["ner"], **looks_up) as redactor:
        for name, (c, s) in work["corpora"].items():
            out = redactor.redact_rows(c, s)
            corpora[name] = json.dumps([out.calls, out.spans], ensure_ascii=False, default=str)
    timings = {
        "redact_s": redact_s,
        "screen_s": screen_s,
        "stage_cpu_s": stage_cpu_s,
        "screen_cpu_s": screen_cpu_s,
        "screen_in_redactor": in_redactor,
        "held": held,
        "stats": result.stats,
    }
    Path(out_file).write_text(json.dumps({**timings, "corpora": corpora}))


if __name__ == "__main__":
    main()
