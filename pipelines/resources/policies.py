"""Policies as resources: where each versioned YAML policy lives, and how to apply it.

Unset paths mean the policy tracelake ships in the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field

from pipelines.redact import KeyRing
from pipelines.redact import Policy as RedactionPolicy
from pipelines.redact import load_policy as load_redaction_policy
from pipelines.retention.policy import Policy, load_policy

if TYPE_CHECKING:  # presidio takes seconds to import: only when a run redacts
    from pipelines.redact.redactor import Redactor, TemplateSource


class RetentionPolicy(dg.ConfigurableResource):
    """Where the retention policy lives."""

    path: str | None = Field(default=None, description="A YAML retention policy; unset: the one tracelake ships")

    def load(self) -> Policy:
        return load_policy(self.path)


class Redaction(dg.ConfigurableResource):
    """How ingest redacts PII before anything is written.

    The keys (``TRACELAKE_HASH_KEY``, ``TRACELAKE_REDACTION_KEY``, ...) are read
    from the environment by ``KeyRing.from_env`` when a run starts, on
    purpose not through resource config: Dagster shows config in its UI.
    """

    mode: str = Field(default="placeholder", description="placeholder, encrypt or synthetic")
    policy_path: str | None = Field(default=None, description="A YAML redaction policy; unset: the one tracelake ships")
    workers: int = Field(default=2, description="Analyzer processes for large batches (one analyzer each)")
    ner: bool | None = Field(default=None, description="Person-name NER (needs the [ner] extra); unset: the policy")

    def policy(self) -> RedactionPolicy:
        return load_redaction_policy(self.policy_path)

    def redactor(self, templates: TemplateSource | None = None) -> Redactor:
        """``templates``: where a call's recorded template is looked up (``TemplateStore.source``)."""
        from pipelines.redact.redactor import Redactor

        return Redactor(self.policy(), self.mode, KeyRing.from_env(), self.workers, ner=self.ner, templates=templates)
