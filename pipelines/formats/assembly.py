"""Batch assembly: joining fragments onto the calls they belong to.

Trace sources split one model call over several records, often in several
objects: the span, the log events that carry its content (OTel 1.28-1.36),
the tool executions and retrievals around it, and scores or feedback that
arrive later. Format modules emit the call from its span and the rest as
``Fragment``s; ``assemble`` joins them, for the calls of one ingest batch or
for calls read back from the warehouse. Joining the same fragment twice
changes nothing, so a re-run is a no-op.

Placement rules:

- content and feedback name their call's span; trace-level feedback goes on
  the trace's last call (the answer the user judged);
- a tool execution goes on the call whose input carries its result (same tool
  call id); without content to match on, on the first call under the same
  parent that started after the tool ended;
- a retrieval goes on the first call under the same parent (or in the trace)
  that started after the retrieval started.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from pipelines.formats.base import Fragment
from pipelines.record.canonical import canonical_json, sha256_hex
from pipelines.record.rows import finalize_call

# Columns a content fragment may fill when the span did not carry them.
CONTENT_COLUMNS = (
    "user_id",
    "session_id",
    "request_model",
    "params",
    "params_extra_json",
    "system_text",
    "messages",
    "tool_definitions",
    "output_messages",
    "output_text",
    "finish_reason",
    "stop_reason_native",
    "request_json",
    "response_id",
    "response_model",
    "usage",
)


def _empty(value: Any) -> bool:
    if isinstance(value, dict):
        return all(v is None for v in value.values())
    return value is None or value == [] or value == ""


def with_feedback_ids(call_id: str, items: Iterable[dict[str, Any]], *, stored: bool = True) -> list[dict[str, Any]]:
    """``items`` (feedback on call ``call_id``), each with an ``id``: the source's own,
    else one derived from what redaction never rewrites: the call, the item's source,
    name and time, and how many items before it on the call share those (32 hex digits
    of their sha256). The comment and the label are left out: they are redacted before
    anything is stored, so the stored item could never again be matched by its text.

    ``stored``: the items may have been read back from rows written before ids were
    derived, which a carry-over comparing text may have doubled: exact copies without
    an id are one item. A format deriving ids at parse (``stored=False``) keeps every item."""
    out: list[dict[str, Any]] = []
    copies: set[str] = set()
    seen: dict[tuple[Any, Any, str], int] = defaultdict(int)
    for item in items:
        if item.get("id"):
            out.append(item)
            continue
        at = str(item.get("created_at"))
        if stored:
            copy = canonical_json({k: v for k, v in item.items() if k != "created_at"} | {"at": at})
            if copy in copies:
                continue
            copies.add(copy)
        basis = (item.get("source"), item.get("name"), at)
        nth = seen[basis]
        seen[basis] += 1
        out.append({**item, "id": sha256_hex("|".join((call_id, "feedback", *map(str, basis), str(nth))))[:32]})
    return out


def add_feedback(call: dict[str, Any], items: Iterable[dict[str, Any]]) -> bool:
    """Append feedback items the call does not have yet, by id (``with_feedback_ids``).
    True when something was added."""
    have = with_feedback_ids(call["call_id"], call.get("feedback") or [])
    known = {f["id"] for f in have}
    new = []
    for item in with_feedback_ids(call["call_id"], items):
        if item["id"] not in known:
            known.add(item["id"])
            new.append(item)
    if new:
        call["feedback"] = [*have, *new]
    return bool(new)


def _same_tool(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.get("span_id"):
        return a.get("span_id") == b.get("span_id")
    if a.get("tool_call_id"):
        return a.get("tool_call_id") == b.get("tool_call_id")
    # a source that names neither: the same tool, input and time is the same execution
    fields = ("name", "arguments_json", "result_json", "started_at")
    return not b.get("span_id") and not b.get("tool_call_id") and all(a.get(f) == b.get(f) for f in fields)


def _add_tool(call: dict[str, Any], execution: dict[str, Any]) -> bool:
    have = call.get("tool_executions") or []
    if any(_same_tool(t, execution) for t in have):
        return False
    call["tool_executions"] = [*have, execution]
    return True


def _add_retrieval(call: dict[str, Any], retrieval: dict[str, Any]) -> bool:
    current = call.get("retrieval")
    if current is None:
        call["retrieval"] = retrieval
        return True
    docs = current.get("documents") or []
    known = {(d.get("doc_id"), d.get("text_sha256")) for d in docs}
    new = [d for d in retrieval.get("documents") or [] if (d.get("doc_id"), d.get("text_sha256")) not in known]
    if not new:
        return False
    # several retrieval steps fed one call: one document list, ranked in arrival order
    for offset, doc in enumerate(new, start=len(docs) + 1):
        docs.append({**doc, "rank": offset})
    current["documents"] = docs
    for key in ("query_text", "embedding_model", "index_snapshot"):
        if current.get(key) is None:
            current[key] = retrieval.get(key)
    return True


def _add_content(call: dict[str, Any], content: dict[str, Any]) -> bool:
    changed = False
    for key in CONTENT_COLUMNS:
        if _empty(call.get(key)) and not _empty(content.get(key)):
            call[key] = content[key]
            changed = True
    if changed and content.get("messages"):
        call["content_captured"] = True
    return changed


def _tool_ids(call: dict[str, Any], part_type: str) -> set[str]:
    return {
        p.get("tool_call_id")
        for m in call.get("messages") or []
        for p in m.get("parts") or []
        if p.get("type") == part_type and p.get("tool_call_id")
    }


def _first_after(calls: list[dict[str, Any]], at: Any) -> dict[str, Any] | None:
    later = [c for c in calls if at is None or c["occurred_at"] >= at]
    return min(later, key=lambda c: (c["occurred_at"], c["span_id"])) if later else None


def _target(fragment: Fragment, by_span: dict, by_trace: dict) -> dict[str, Any] | None:
    trace_calls = by_trace.get(fragment.trace_id) or []
    if fragment.kind in ("content", "feedback") and fragment.span_id:
        return by_span.get((fragment.trace_id, fragment.span_id))
    if fragment.kind == "feedback":
        return max(trace_calls, key=lambda c: (c["occurred_at"], c["span_id"])) if trace_calls else None
    siblings = [c for c in trace_calls if c.get("parent_span_id") == fragment.parent_span_id]
    if fragment.kind == "tool_execution":
        tool_call_id = fragment.payload.get("tool_call_id")
        if tool_call_id:
            fed = [c for c in trace_calls if tool_call_id in _tool_ids(c, "tool_result")]
            if fed:
                return _first_after(fed, None)
            if any(tool_call_id in _tool_ids(c, "tool_call") for c in trace_calls):
                return None  # its call is known, the call its result fed is not (yet)
        return _first_after(siblings, fragment.at) or _first_after(trace_calls, fragment.at)
    if fragment.kind == "retrieval":
        return _first_after(siblings, fragment.at) or _first_after(trace_calls, fragment.at)
    return None


APPLY = {
    "content": _add_content,
    "tool_execution": _add_tool,
    "retrieval": _add_retrieval,
    "feedback": lambda call, item: add_feedback(call, [item]),
}


def refinalize(call: dict[str, Any]) -> dict[str, Any]:
    """Finalize a call again after columns changed: hashes and capture flags follow."""
    call["block_hashes"] = None
    return finalize_call(call)


def assemble(calls: list[dict[str, Any]], fragments: Iterable[Fragment]) -> tuple[list[dict[str, Any]], list[Fragment]]:
    """Join ``fragments`` onto ``calls`` (in place). Returns (calls that changed, fragments that found no call)."""
    by_span = {(c["trace_id"], c["span_id"]): c for c in calls}
    by_trace: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in calls:
        by_trace[c["trace_id"]].append(c)
    # content first: tool results are matched on the messages it brings
    ordered = sorted(fragments, key=lambda f: f.kind != "content")
    changed: dict[str, dict[str, Any]] = {}
    leftover = []
    for fragment in ordered:
        target = _target(fragment, by_span, by_trace)
        if target is None:
            leftover.append(fragment)
            continue
        if APPLY[fragment.kind](target, fragment.payload):
            changed[target["call_id"]] = target
    for call in changed.values():
        refinalize(call)
    return list(changed.values()), leftover


CARRIED_LISTS = ("feedback", "tool_executions")


def carry_over(call: dict[str, Any], existing: dict[str, Any]) -> bool:
    """A call ingested again keeps what assembly joined onto its earlier version
    (feedback, tool executions, retrieval, content from other objects). True when it changed."""
    changed = add_feedback(call, existing.get("feedback") or [])
    if existing.get("occurred_date") != call.get("occurred_date"):
        # records that know no time of their own (batch results) were dated by
        # their object; the call keeps the time it was first seen, so it stays one row
        call["occurred_at"] = existing["occurred_at"]
        changed = True
    for execution in existing.get("tool_executions") or []:
        changed = _add_tool(call, execution) or changed
    if existing.get("retrieval") is not None:
        changed = _add_retrieval(call, existing["retrieval"]) or changed
    changed = _add_content(call, existing) or changed
    return changed
