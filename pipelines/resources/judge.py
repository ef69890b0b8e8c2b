"""The judge stage's resources: where its policy lives, and where alerts go."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from pipelines.judge.alerts import post
from pipelines.judge.policy import Policy, load_policy


class JudgePolicy(dg.ConfigurableResource):
    """Where the judge policy lives (sampling, incident switch, thresholds, judge model and budget)."""

    path: str | None = Field(default=None, description="A YAML judge policy; unset: the one tracelake ships")

    def load(self) -> Policy:
        return load_policy(self.path)


class AlertWebhook(dg.ConfigurableResource):
    """A Slack-compatible incoming webhook. The URL is a secret: it reaches the resource as an
    environment reference (``TRACELAKE_ALERT_WEBHOOK``), never as a config value."""

    url: str | None = Field(default=None, description="webhook URL (an EnvVar); unset: alerts are only logged")
    timeout_seconds: float = 10.0

    @property
    def configured(self) -> bool:
        return bool(self.url)

    def send(self, payload: dict) -> int:
        if not self.url:
            raise RuntimeError("no alert webhook configured; set TRACELAKE_ALERT_WEBHOOK")
        return post(self.url, payload, self.timeout_seconds)
