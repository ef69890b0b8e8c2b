"""Diff-replaying the long-prompt demo day for one candidate: tracelake's replay stage
(Message Batches + prompt caching + content addressing, through the LLM resource,
as today's API takes it) next to the loop most people write first
(``asyncio.gather`` over ``messages.create``, one request per replayed trace),
both against tracelake's simulator in the same run, sending the same requests
(each call's candidate request and its paired baseline).

The day is the demo's ``support.kb`` route (``pipelines/demo/kb.py``): a ~900-token
system prompt, six ~600-token retrieved articles and three tool definitions in
front of a short customer turn, recorded on claude-sonnet-4-5-20250929 (retired:
replayed, with its baselines, on claude-sonnet-4-6); the candidate is the demo's
``kb-haiku``. Both sides send what API version 2026-10-21 takes (no temperature).

    .venv/bin/python bench/replay.py                 # a 600-call day
    .venv/bin/python bench/replay.py --calls 120     # small and quick

Prints what the replay plan estimated, then tokens billed, cost and wall time of
each way, the cost ratio (target: at most 0.35x the loop's) and the saving split
into what the batch discount and what cache reads took off.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import anthropic
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from assets.replay import answered, asker, sender  # noqa: E402
from bench.rot import DAY, prepare  # noqa: E402
from pipelines.demo.registry import FOLDER  # noqa: E402
from pipelines.llm.lifecycle import load, serve  # noqa: E402
from pipelines.llm.params import Translator, split_for_sdk  # noqa: E402
from pipelines.llm.pricing import cost_usd  # noqa: E402
from pipelines.llm.request import LLMRequest  # noqa: E402
from pipelines.replay.candidates import parse_candidate  # noqa: E402
from pipelines.replay.day import CALL_COLUMNS, DayInputs, replay_day  # noqa: E402
from pipelines.replay.plan import plan_replay  # noqa: E402
from pipelines.resources.warehouse import Warehouse  # noqa: E402
from pipelines.simulator import Simulator, running, simulated_llm  # noqa: E402

TARGET = 0.35
CANDIDATE = parse_candidate((FOLDER / "kb-haiku.yaml").read_text(), "kb-haiku.yaml")


class Log:
    def info(self, message: str) -> None:
        print(f"  {message}", file=sys.stderr)


def naive(url: str, bodies: list[dict]) -> None:
    """The loop people write first: one messages.create per request, all at once."""

    async def main() -> None:
        client = anthropic.AsyncAnthropic(base_url=url, api_key="sk-bench", max_retries=6)
        limit = asyncio.Semaphore(64)
        names = frozenset(("model", "messages", "max_tokens", "system", "tools", "tool_choice", "metadata"))

        async def one(body: dict) -> None:
            kwargs, extra = split_for_sdk(body, names)
            async with limit:
                await client.messages.create(**kwargs, extra_body=extra or None)

        await asyncio.gather(*(one(b) for b in bodies))
        await client.close()

    asyncio.run(main())


def billed(sim: Simulator) -> dict[str, float]:
    usage: Counter = Counter()
    full = 0.0
    for bill in sim.bills:
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            usage[key] += bill.usage.get(key) or 0
        full += cost_usd(bill.model, {**bill.usage, "service_tier": "standard"})  # the same usage, no discount
    return {**usage, "usd": sim.billed_usd, "usd_full_price": full, "requests": len(sim.bills)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=600, help="support.kb calls in the day (default 600)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "rot")
    args = parser.parse_args()

    warehouse, _ = prepare(args.out, 0, args.seed, long_prompt_calls=args.calls)
    ledger = Path(warehouse.uri).parent / "replay-bench"  # a fresh ledger each run: nothing reused
    shutil.rmtree(ledger, ignore_errors=True)
    scratch = Warehouse(uri=str(ledger))

    calls = warehouse.read("calls", pl.col("occurred_date") == DAY, list(CALL_COLUMNS)).to_dicts()
    lifecycle = load()
    inputs = DayInputs(candidate=CANDIDATE, day=DAY, calls=calls, serve=lambda body: serve(lifecycle, body))
    sent: list[LLMRequest] = []

    with running() as ours:
        llm = simulated_llm(ours)
        plan = plan_replay(
            [inputs], answered=answered(llm, scratch), translator=Translator("2026-10-21"), lifecycle=lifecycle
        )
        counts: Counter = Counter()
        send = sender(asker(llm, scratch, "bench", Log(), counts))

        def recording(outgoing):
            sent.extend(outgoing)
            return send(outgoing)

        t = time.perf_counter()
        rows = replay_day(replace(inputs), recording, run_id="bench")
        ours_s = time.perf_counter() - t
        ours_bill = billed(ours)

    today = Translator("2026-10-21")  # what the loop must send too: 2026-10-21 refuses temperature
    bodies = [today.wire(o.body, cache_prefix=False)[0] for o in sent]
    with running() as theirs:
        t = time.perf_counter()
        naive(theirs.url, bodies)
        naive_s = time.perf_counter() - t
        naive_bill = billed(theirs)
        refused = sum(1 for r in theirs.log if r.status >= 400)

    replayed = sum(r["fidelity"] != "ineligible" for r in rows)
    print(
        f"diff replay of a {len(calls):,}-call long-prompt day (support.kb: ~5,000-token prefix) for candidate "
        f"{CANDIDATE.id} ({replayed:,} calls replayed, {len(sent):,} distinct requests incl. paired baselines), "
        "simulated LLM"
    )
    print(f"  plan: up to ${plan.usd:.4f} without cache reads, about ${plan.usd_with_cache:.4f} with them")
    header = (
        f"  {'':34}{'requests':>10}{'input tok':>12}{'output tok':>12}{'cache read':>12}{'cache write':>12}"
        f"{'cost USD':>11}{'wall s':>9}"
    )
    print(header)
    for name, bill, seconds in (
        ("replay stage (batches + caching)", ours_bill, ours_s),
        ("asyncio.gather + messages.create", naive_bill, naive_s),
    ):
        print(
            f"  {name:34}{bill['requests']:>10,}{bill['input_tokens']:>12,}{bill['output_tokens']:>12,}"
            f"{bill['cache_read_input_tokens']:>12,}{bill['cache_creation_input_tokens']:>12,}"
            f"{bill['usd']:>11.4f}{seconds:>9.1f}"
        )
    loop, stage, full = naive_bill["usd"], ours_bill["usd"], ours_bill["usd_full_price"]
    ratio = stage / loop
    print(
        f"  cost ratio (stage / loop): {ratio:.3f}x (target <= {TARGET}x: {'met' if ratio <= TARGET else 'NOT met'})"
        f"   wall-time ratio: {ours_s / naive_s:.2f}"
    )
    print(
        f"  saving ${loop - stage:.4f} = cache reads ${loop - full:.4f} ({(loop - full) / loop:.0%} of the loop's cost)"
        f" + batch discount ${full - stage:.4f} ({(full - stage) / loop:.0%})"
    )
    if refused:
        print(f"  the loop had {refused} requests refused by the API")


if __name__ == "__main__":
    main()
