"""Alerts of the judge stage, as Slack-compatible webhook JSON, and posting them.

The payload is what Slack's incoming webhooks take (``text`` plus ``blocks``);
Mattermost, Rocket.Chat and most chat bridges accept the same body.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Alert:
    check: str
    asset: str
    partition: str | None
    summary: str
    details: dict[str, Any]
    run_id: str | None = None


def slack_payload(alert: Alert) -> dict[str, Any]:
    title = f":warning: tracelake {alert.check} on {alert.asset}" + (f" ({alert.partition})" if alert.partition else "")
    fields = [{"type": "mrkdwn", "text": f"*{k}*\n{v}"} for k, v in list(alert.details.items())[:10]]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": alert.summary[:3000]}},
    ]
    if fields:
        blocks.append({"type": "section", "fields": fields})
    if alert.run_id:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"run {alert.run_id}"}]})
    return {"text": f"{title}: {alert.summary}"[:3000], "blocks": blocks}


class WebhookError(RuntimeError):
    """The webhook refused or could not be reached; the message names the host and status, not the URL path."""


def post(url: str, payload: dict[str, Any], timeout: float = 10.0) -> int:
    """POST the payload as JSON; returns the HTTP status. The URL's path is a secret: never in errors."""
    host = urllib.parse.urlparse(url).netloc
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as e:
        raise WebhookError(f"alert webhook at {host} answered HTTP {e.code}; check TRACELAKE_ALERT_WEBHOOK") from None
    except (urllib.error.URLError, TimeoutError) as e:
        reason = getattr(e, "reason", e)
        raise WebhookError(f"alert webhook at {host} unreachable ({reason}); check TRACELAKE_ALERT_WEBHOOK") from None
