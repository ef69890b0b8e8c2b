"""The replay key as a resource: what decrypts encrypt-mode calls for an exact replay.

It holds no secret: the key is read from the environment each time a run
decrypts (``TRACELAKE_REDACTION_KEY`` / ``TRACELAKE_REDACTION_KEYS``, or the
reference ``TRACELAKE_REDACTION_KEY_REF``; ``pipelines.replay.unlock``), so
Dagster's UI, run config and storage never see it. Without one, replays of
encrypt-mode calls send their tokens and say ``replay_key_absent``.
"""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from pipelines.replay.unlock import Unlocker, replay_keys


class ReplayKey(dg.ConfigurableResource):
    policy_path: str | None = Field(
        default=None, description="The redaction policy the calls were written under; unset: the one tracelake ships"
    )

    def unlocker(self) -> Unlocker:
        """Decrypts calls for one run, with the key the environment holds now (or none)."""
        from pipelines.redact.policy import load_policy

        keys = replay_keys()
        return Unlocker(keys, load_policy(self.policy_path) if keys is not None else None)
