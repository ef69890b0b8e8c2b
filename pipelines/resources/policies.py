"""Policies as resources: where each versioned YAML policy lives.

Unset paths mean the policy tracelake ships in the package.
"""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from pipelines.retention.policy import Policy, load_policy


class RetentionPolicy(dg.ConfigurableResource):
    """Where the retention policy lives."""

    path: str | None = Field(default=None, description="A YAML retention policy; unset: the one tracelake ships")

    def load(self) -> Policy:
        return load_policy(self.path)
