"""Context windows by model: a small, versioned table (``model_info.yaml``).

A dated snapshot matches its family by prefix; a model not in the table is
unknown, and callers say so instead of guessing a window.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

TABLE = Path(__file__).with_name("model_info.yaml")


@dataclass(frozen=True)
class ModelInfo:
    version: str
    windows: dict[str, int]

    def context_window(self, model: str | None) -> int | None:
        """The model's context window in input tokens, or None when the table does not know it."""
        if not model:
            return None
        name = model.split("/")[-1].removeprefix("anthropic.").lower()
        matches = [family for family in self.windows if name == family or name.startswith(family + "-")]
        if not matches:
            return None
        return self.windows[max(matches, key=len)]


@lru_cache(maxsize=4)
def load_model_info(path: str | None = None) -> ModelInfo:
    data = yaml.safe_load(Path(path or TABLE).read_text(encoding="utf-8"))
    return ModelInfo(version=str(data["version"]), windows={str(k).lower(): int(v) for k, v in data["models"].items()})
