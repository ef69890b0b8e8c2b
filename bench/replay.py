"""Diff-replaying a demo day for one candidate: tracelake's replay stage (Message
Batches + prompt caching + content addressing, through the LLM resource) next to
the 30-line loop most people write first (``asyncio.gather`` over
``messages.create``, one request per replayed trace), both against tracelake's
simulator in the same run, sending the same requests (each call's candidate
request and its paired baseline).

    .venv/bin/python bench/replay.py                 # a 2,000-call day
    .venv/bin/python bench/replay.py --calls 300     # small and quick

Prints tokens billed, cost and wall time of each, and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import anthropic
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from assets.replay import asker, sender  # noqa: E402
from bench.rot import DAY, prepare  # noqa: E402
from pipelines.llm.params import wire_body  # noqa: E402
from pipelines.llm.request import LLMRequest  # noqa: E402
from pipelines.replay.candidates import Candidate  # noqa: E402
from pipelines.replay.day import CALL_COLUMNS, DayInputs, replay_day  # noqa: E402
from pipelines.resources.warehouse import Warehouse  # noqa: E402
from pipelines.simulator import Simulator, running, simulated_llm  # noqa: E402

# every call of the day, on the next Sonnet snapshot
CANDIDATE = Candidate(
    id="bench-sonnet-next",
    description="every route on claude-sonnet-4-6-20261015",
    model="claude-sonnet-4-6-20261015",
    modes=("diff",),
    sample={"per_stratum": 1_000_000},
)


class Log:
    def info(self, message: str) -> None:
        print(f"  {message}", file=sys.stderr)


def naive(url: str, bodies: list[dict]) -> None:
    """The loop people write first: one messages.create per request, all at once."""

    async def main() -> None:
        client = anthropic.AsyncAnthropic(base_url=url, api_key="sk-bench", max_retries=6)
        limit = asyncio.Semaphore(64)

        async def one(body: dict) -> None:
            sampling = {k: body[k] for k in ("temperature", "top_p", "top_k") if k in body}
            rest = {k: v for k, v in body.items() if k not in sampling}
            async with limit:
                await client.messages.create(**rest, extra_body=sampling)

        await asyncio.gather(*(one(b) for b in bodies))
        await client.close()

    asyncio.run(main())


def billed(sim: Simulator) -> dict[str, float]:
    usage = Counter()
    for bill in sim.bills:
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            usage[key] += bill.usage.get(key) or 0
    return {**usage, "usd": sim.billed_usd, "requests": len(sim.bills)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls in the demo day (default 2,000)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "rot")
    args = parser.parse_args()

    warehouse, _ = prepare(args.out, args.calls, args.seed)
    ledger = Path(warehouse.uri).parent / "replay-bench"  # a fresh ledger each run: nothing reused
    shutil.rmtree(ledger, ignore_errors=True)
    scratch = Warehouse(uri=str(ledger))

    calls = warehouse.read("calls", pl.col("occurred_date") == DAY, list(CALL_COLUMNS)).to_dicts()
    inputs = DayInputs(candidate=CANDIDATE, day=DAY, calls=calls)
    sent: list[LLMRequest] = []

    with running() as ours:
        llm = simulated_llm(ours)
        counts: Counter = Counter()
        send = sender(asker(llm, scratch, "bench", Log(), counts))

        def recording(outgoing):
            sent.extend(outgoing)
            return send(outgoing)

        t = time.perf_counter()
        rows = replay_day(inputs, recording, run_id="bench")
        ours_s = time.perf_counter() - t
        ours_bill = billed(ours)

    bodies = [wire_body(o.body, cache_prefix=False) for o in sent]
    with running() as theirs:
        t = time.perf_counter()
        naive(theirs.url, bodies)
        naive_s = time.perf_counter() - t
        naive_bill = billed(theirs)

    replayed = sum(r["fidelity"] != "ineligible" for r in rows)
    print(
        f"diff replay of a {len(calls):,}-call demo day for one candidate ({replayed:,} calls replayed, "
        f"{len(sent):,} distinct requests incl. paired baselines), simulated LLM"
    )
    header = (
        f"  {'':34}{'requests':>10}{'input tok':>12}{'output tok':>12}{'cache read':>12}{'cost USD':>11}{'wall s':>9}"
    )
    print(header)
    for name, bill, seconds in (
        ("replay stage (batches + caching)", ours_bill, ours_s),
        ("asyncio.gather + messages.create", naive_bill, naive_s),
    ):
        print(
            f"  {name:34}{bill['requests']:>10,}{bill['input_tokens']:>12,}{bill['output_tokens']:>12,}"
            f"{bill['cache_read_input_tokens']:>12,}{bill['usd']:>11.4f}{seconds:>9.1f}"
        )
    print(
        f"  cost ratio (stage / loop): {ours_bill['usd'] / naive_bill['usd']:.2f}   "
        f"wall-time ratio: {ours_s / naive_s:.2f}"
    )


if __name__ == "__main__":
    main()
