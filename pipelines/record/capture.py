"""Which items of the capture list a call is missing: its replayability.

A call can be replayed exactly only when all of these were captured: the
input, the prompt version, the model and its params, every tool call with its
result, intermediate observations (retrieved texts, tool outputs), the output
and its finish reason, the seed, and the timestamp with the response id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _tool_call_ids(messages: list[Mapping[str, Any]]) -> tuple[set[str], set[str]]:
    """(tool call ids the messages' tool_call parts name, those their tool_result parts name), in one pass."""
    made: set[str] = set()
    results: set[str] = set()
    for m in messages:
        for p in m.get("parts") or ():
            kind = p.get("type")
            if kind == "tool_call" or kind == "tool_result":
                tool_call_id = p.get("tool_call_id")
                if tool_call_id:
                    (made if kind == "tool_call" else results).add(tool_call_id)
    return made, results


def missing_capture_items(call: Mapping[str, Any]) -> list[str]:
    missing = []
    messages = call.get("messages") or []
    if not messages or call.get("content_captured") is False:
        missing.append("input")
    if not call.get("template_id") or not call.get("template_version"):
        missing.append("prompt_version")
    params = call.get("params") or {}
    if not call.get("request_model") or params.get("max_tokens") is None:
        missing.append("model_params")
    calls_made, results = _tool_call_ids(messages)
    results |= {t["tool_call_id"] for t in call.get("tool_executions") or [] if t.get("result_json") is not None}
    if calls_made - results:
        missing.append("tool_results")
    retrieval = call.get("retrieval") or {}
    docs = retrieval.get("documents") or []
    executions = call.get("tool_executions") or []
    if any(d.get("text") is None for d in docs) or any(t.get("result_json") is None for t in executions):
        missing.append("intermediate_observations")
    if (call.get("output_text") is None and not call.get("output_messages")) or call.get("finish_reason") is None:
        missing.append("output_finish_reason")
    if params.get("seed") is None:
        missing.append("seed")
    if call.get("occurred_at") is None or not call.get("response_id"):
        missing.append("timestamp_response_id")
    return missing


def context_complete(call: Mapping[str, Any]) -> bool:
    """False when the request leaned on state the record does not hold:
    server-side continuation, or content that was not captured or was cut."""
    return not (
        call.get("previous_response_id")
        or call.get("content_captured") is False
        or call.get("truncated")
        or not call.get("messages")
    )
