"""Rebuilding the final Message body from a Messages API event stream."""

from __future__ import annotations

import json
from typing import Any


class MessageAccumulator:
    """Feed it stream events (SDK objects or dicts); ``message`` is the response body they add up to."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self._partial_json: dict[int, str] = {}

    def add(self, event: Any) -> None:
        e = event.model_dump(exclude_none=True) if hasattr(event, "model_dump") else dict(event)
        kind = e.get("type")
        if kind == "message_start":
            self.message = dict(e.get("message") or {})
            self.message["content"] = []
        elif self.message is None:
            return
        elif kind == "content_block_start":
            block = dict(e.get("content_block") or {})
            self.message["content"].append(block)
        elif kind == "content_block_delta":
            block = self.message["content"][e["index"]]
            delta = e.get("delta") or {}
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif delta.get("type") == "input_json_delta":
                self._partial_json[e["index"]] = self._partial_json.get(e["index"], "") + delta.get("partial_json", "")
            elif delta.get("type") == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            elif delta.get("type") == "signature_delta":
                block["signature"] = delta.get("signature")
        elif kind == "content_block_stop":
            text = self._partial_json.pop(e["index"], None)
            if text is not None:
                self.message["content"][e["index"]]["input"] = json.loads(text) if text else {}
        elif kind == "message_delta":
            delta = e.get("delta") or {}
            self.message["stop_reason"] = delta.get("stop_reason")
            self.message["stop_sequence"] = delta.get("stop_sequence")
            usage = dict(self.message.get("usage") or {})
            usage.update({k: v for k, v in (e.get("usage") or {}).items() if v is not None})
            self.message["usage"] = usage
