"""The `tracelake` command: a thin shell over the same core functions the assets call.

One module per area, each registering its commands on ``app``; the core
packages (``pipelines.redact``, ``pipelines.rot``, ...) know nothing of the CLI.
"""

from pipelines.cli import debug, investigate, judge, llm, pipeline, redact, replay, retention, rot  # noqa: F401  (each registers its commands)
from pipelines.cli.app import app

__all__ = ["app"]
