"""tracelake's local Messages + Message Batches API simulator (see ``server.py``).

    with running() as sim:                 # real HTTP on 127.0.0.1, a free port
        llm = simulated_llm(sim)           # the LLM resource pointed at it
        results = list(llm.run(requests, warehouse, run_id="r1"))
        sim.log                            # every HTTP request it received

``tracelake simulate-llm --port N`` runs one standalone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pipelines.simulator.faults import Faults
from pipelines.simulator.server import Bill, Received, Simulator

if TYPE_CHECKING:
    from pipelines.resources.llm import LLM

__all__ = ["Bill", "Faults", "Received", "Simulator", "running", "simulated_llm"]


@contextmanager
def running(faults: Faults | None = None, **options: Any) -> Iterator[Simulator]:
    """A simulator serving on a free loopback port for the duration of the block."""
    with Simulator(faults=faults or Faults(), **options) as sim:
        yield sim


def simulated_llm(sim: Simulator | str, **overrides: Any) -> LLM:
    """The LLM resource with backend "simulator" pointed at ``sim`` (a Simulator or its URL).

    Polls batches every 50 ms instead of 30 s: the simulator ends them quickly.
    """
    from pipelines.resources.llm import LLM  # the resource imports dagster; the simulator does not

    url = sim if isinstance(sim, str) else sim.url
    settings: dict[str, Any] = {"backend": "simulator", "base_url": url, "poll_interval_seconds": 0.05}
    return LLM(**{**settings, **overrides})
