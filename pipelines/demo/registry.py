"""The demo's replay candidates (``candidates/*.yaml`` beside this module):
``support-answer-v4``, a template version that fixes Portuguese answers and
truncates long English ones, ``sonnet-next``, a model upgrade, and
``kb-haiku``, the long-prompt route on a cheaper model (where prompt caching
pays), and ``verify-sonnet``, the identity-check route whose encrypted day replays
``exact``. ``install`` copies them into a candidate registry (a folder or an s3:// prefix)."""

from __future__ import annotations

from pathlib import Path

from pipelines.demo.objects import ObjectWriter

FOLDER = Path(__file__).parent / "candidates"
DEMO_CANDIDATES = ("support-answer-v4", "sonnet-next", "kb-haiku", "verify-sonnet")


def install(uri: str, endpoint_url: str | None = None) -> list[str]:
    """Write the demo candidates into the registry at ``uri``; returns their ids."""
    writer = ObjectWriter(uri, endpoint_url)
    for candidate in DEMO_CANDIDATES:
        writer.put(f"{candidate}.yaml", (FOLDER / f"{candidate}.yaml").read_bytes())
    return list(DEMO_CANDIDATES)
