"""What a run worker pays before it runs: loading the code location.

Every Dagster run worker, code server and shard pod imports ``pipelines.definitions``
(every asset, job, sensor and resource) before it does anything. This bench starts
fresh interpreters, in turns, importing:

- ``dagster`` alone: the floor, Dagster's own import;
- ``pipelines.definitions``: the code location;

and reports the median wall and CPU seconds of each and their ratio, with which heavy
libraries the code location pulled in (the anthropic SDK, statsmodels and Presidio load
only in the runs that send a request, compute a rate or redact:
``tests/ingest/test_layering.py::test_loading_the_code_location_imports_no_llm_sdk_no_statistics_and_no_nlp``).

    python bench/startup.py            # 7 turns
    python bench/startup.py --turns 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("anthropic", "statsmodels", "scipy", "presidio_analyzer", "spacy", "polars", "deltalake")
PROBE = """
import json, sys, time
started, cpu = time.perf_counter(), time.process_time()
import {module}
print(json.dumps({{"wall": time.perf_counter() - started, "cpu": time.process_time() - cpu,
                  "loaded": [m for m in {heavy!r} if m in sys.modules]}}))
"""


def probe(module: str) -> dict:
    code = PROBE.format(module=module, heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=7)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"dagster": [], "pipelines.definitions": []}
    for _ in range(args.turns):
        for module in results:
            results[module].append(probe(module))
    medians = {m: {k: statistics.median(r[k] for r in rs) for k in ("wall", "cpu")} for m, rs in results.items()}
    for module, median in medians.items():
        loaded = ", ".join(results[module][-1]["loaded"]) or "none of them"
        print(f"import {module:<22} {median['wall']:5.2f} s wall  {median['cpu']:5.2f} CPU-s   heavy: {loaded}")
    floor, location = medians["dagster"], medians["pipelines.definitions"]
    ratio = location["wall"] / floor["wall"]
    print(f"the code location: {ratio:.2f}x Dagster's own import (median of {args.turns} turns)")


if __name__ == "__main__":
    main()
