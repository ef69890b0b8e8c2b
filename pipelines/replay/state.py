"""State replay of an agent session: resume from step N with the recorded
messages, serve the recorded tool results (no tool is called live), and let the
candidate continue up to a step limit.

A tool call the candidate makes is answered with the recorded result of the
same tool with the same arguments, else the next unused recorded result of that
tool; when the record has none, the replay stops there and says so
(``no_recorded_result:<tool>``): inventing a result would replay nothing.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from typing import Any

from pipelines.replay.bodies import Answer


def _canonical_args(text: str | None) -> str:
    try:
        return json.dumps(json.loads(text) if text else {}, sort_keys=True, ensure_ascii=False)
    except ValueError:
        return text or ""


class RecordedTools:
    """The tool results recorded anywhere in a session, by tool and arguments."""

    def __init__(self, session_calls: Sequence[Mapping[str, Any]]):
        self.exact: dict[tuple[str, str], deque[Any]] = defaultdict(deque)
        self.by_name: dict[str, deque[Any]] = defaultdict(deque)
        seen: set[str] = set()
        for call in session_calls:
            calls_made: dict[str, tuple[str, str]] = {}
            for message in call.get("messages") or []:
                for part in message.get("parts") or []:
                    if part.get("type") == "tool_call":
                        calls_made[part.get("tool_call_id")] = (part.get("tool_name"), part.get("arguments_json"))
                    elif part.get("type") == "tool_result" and part.get("tool_call_id") in calls_made:
                        if part["tool_call_id"] in seen:
                            continue
                        seen.add(part["tool_call_id"])
                        name, args = calls_made[part["tool_call_id"]]
                        self._add(name, args, json.loads(part["content_json"]) if part.get("content_json") else "")
            for execution in call.get("tool_executions") or []:
                if execution.get("tool_call_id") in seen or execution.get("result_json") is None:
                    continue
                seen.add(execution.get("tool_call_id"))
                self._add(execution.get("name"), execution.get("arguments_json"), json.loads(execution["result_json"]))

    def _add(self, name: str | None, args: str | None, result: Any) -> None:
        self.exact[(name or "", _canonical_args(args))].append(result)
        self.by_name[name or ""].append(result)

    def serve(self, name: str, arguments: str) -> tuple[bool, Any]:
        """(found, the recorded result) for a tool call the candidate made."""
        same = self.exact.get((name, arguments))
        pool = same if same else self.by_name.get(name)
        if not pool:
            return False, None
        result = pool[0] if len(pool) == 1 else pool.popleft()
        return True, result


def next_body(
    body: Mapping[str, Any], answer: Answer, tools: RecordedTools
) -> tuple[dict[str, Any] | None, str | None]:
    """The request after ``answer``'s tool calls were answered from the record,
    or (None, why the session stops)."""
    if answer.finish_reason != "tool_call":
        return None, "finished"
    results = []
    for block in answer.content:
        if block.get("type") != "tool_use":
            continue
        arguments = json.dumps(block.get("input") or {}, sort_keys=True, ensure_ascii=False)
        found, result = tools.serve(block.get("name") or "", arguments)
        if not found:
            return None, f"no_recorded_result:{block.get('name')}"
        content = result if isinstance(result, (str, list)) else json.dumps(result, ensure_ascii=False)
        results.append({"type": "tool_result", "tool_use_id": block.get("id"), "content": content})
    messages = [
        *body.get("messages", []),
        {"role": "assistant", "content": list(answer.content)},
        {"role": "user", "content": results},
    ]
    return {**body, "messages": messages}, None
