"""The server-sent events that stream a Messages response, as the API sends them."""

from __future__ import annotations

import json
from typing import Any


def stream_events(reply: dict[str, Any]) -> list[dict[str, Any]]:
    usage_ = dict(reply.get("usage") or {})
    start = {
        **reply,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage_, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(reply.get("content") or []):
        if block["type"] == "text":
            events.append(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            )
            text = block["text"]
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                delta = {"type": "text_delta", "text": piece}
                events.append({"type": "content_block_delta", "index": index, "delta": delta})
        elif block["type"] == "tool_use":
            events.append({"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        else:
            events.append({"type": "content_block_start", "index": index, "content_block": block})
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": reply.get("stop_reason"), "stop_sequence": reply.get("stop_sequence")},
            "usage": {"output_tokens": usage_.get("output_tokens", 0)},
        }
    )
    events.append({"type": "message_stop"})
    return events


def encode(events: list[dict[str, Any]]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
