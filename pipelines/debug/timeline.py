"""One trace as a timeline of steps: the plain data both renderers (terminal
and HTML) draw, so they cannot disagree about what happened.

A step is a span (llm call, tool call, retrieval, think, state change, check,
session start/end). An llm step carries its call's model, tokens, finish
reason, retrieved documents and output; a tool step its name, arguments and
result. The judge's findings (`state_violations`, `semantic_errors`) are
attached at the step they name; the first state violation is marked.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# redaction placeholders (<EMAIL_ADDRESS_1>) and encrypted values (<ENC:TYPE:key:...>)
PLACEHOLDER = re.compile(r"<(?:ENC:[A-Z_]+:[^<>\s]+|[A-Z][A-Z_]*_\d+)>")
KIND_ORDER = {"session_start": 0, "retrieval": 1, "llm_call": 2, "tool": 3, "think": 4, "state": 5, "check": 6}


@dataclass
class Text:
    """A long value of a step (an output, tool arguments, a result)."""

    label: str
    value: str


@dataclass
class Step:
    number: int
    kind: str
    title: str
    at: datetime | None
    status: str | None
    facts: list[tuple[str, str]] = field(default_factory=list)
    texts: list[Text] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    first_violation: bool = False
    call_id: str | None = None


@dataclass
class Timeline:
    trace_id: str
    facts: list[tuple[str, str]]
    steps: list[Step]
    unplaced_findings: list[str] = field(default_factory=list)


def segments(text: str) -> list[tuple[str, bool]]:
    """``text`` cut into (piece, is_placeholder) so renderers can show
    redaction placeholders as such without building markup from the text."""
    out, last = [], 0
    for m in PLACEHOLDER.finditer(text):
        if m.start() > last:
            out.append((text[last : m.start()], False))
        out.append((m.group(0), True))
        last = m.end()
    if last < len(text):
        out.append((text[last:], False))
    return out


def _json_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True)


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    try:
        value = json.loads(span.get("attributes_json") or "{}")
    except ValueError:
        return {"attributes": span.get("attributes_json")}
    return value if isinstance(value, dict) else {"attributes": value}


def _llm_step(step: Step, call: dict[str, Any] | None) -> None:
    if call is None:
        step.facts.append(("call", "not in `calls` (span only)"))
        return
    usage = call.get("usage") or {}
    model = call.get("response_model") or call.get("request_model") or "?"
    step.title = f"llm call  {model}"
    step.call_id = call["call_id"]
    step.facts += [
        ("call", call["call_id"]),
        ("template", " ".join(str(v) for v in (call.get("template_id"), call.get("template_version")) if v) or "-"),
        (
            "tokens",
            f"in {usage.get('input_tokens') or 0} (cache read {usage.get('cache_read_input_tokens') or 0})"
            f" / out {usage.get('output_tokens') or 0}",
        ),
        ("finish", f"{call.get('finish_reason') or '-'} ({call.get('stop_reason_native') or '-'})"),
        ("latency", f"{call.get('latency_ms') or 0:.0f} ms"),
    ]
    if call.get("status") == "error" or call.get("error_type"):
        step.facts.append(("error", f"{call.get('error_type') or 'error'}: {call.get('error_message') or ''}"))
    for item in call.get("feedback") or []:
        value = item.get("value_string") if item.get("value_string") is not None else item.get("value_number")
        step.facts.append(
            ("feedback", f"{item.get('name')}={value}" + (f"  {item['comment']}" if item.get("comment") else ""))
        )
    retrieval = call.get("retrieval") or {}
    docs = retrieval.get("documents") or []
    if docs:
        listed = ", ".join(
            f"{d['doc_id']} ({d['score']:.3f})" if d.get("score") is not None else d["doc_id"] for d in docs
        )
        step.facts.append(("retrieved", f"{listed}  [{retrieval.get('index_snapshot') or '-'}]"))
    messages = call.get("messages") or []
    if messages:
        last = messages[-1]
        step.texts.append(Text(f"last input ({last.get('role')})", _parts_text(last.get("parts") or [])))
    for m in call.get("output_messages") or []:
        text = _parts_text(m.get("parts") or [])
        if text:
            step.texts.append(Text("output", text))
    if not call.get("output_messages") and call.get("output_text"):
        step.texts.append(Text("output", call["output_text"]))


def _parts_text(parts: list[dict[str, Any]]) -> str:
    lines = []
    for p in parts:
        kind = p.get("type")
        if kind == "text":
            lines.append(p.get("text") or "")
        elif kind == "tool_call":
            lines.append(f"-> tool_call {p.get('tool_name')}({p.get('arguments_json') or ''})")
        elif kind == "tool_result":
            flag = " ERROR" if p.get("is_error") else ""
            lines.append(f"<- tool_result{flag} {p.get('content_json') or p.get('text') or ''}")
        else:
            lines.append(f"[{kind}] {p.get('text') or p.get('native_json') or ''}")
    return "\n".join(lines)


def _span_step(step: Step, span: dict[str, Any]) -> None:
    attrs = _attrs(span)
    kind = span.get("kind")
    if kind == "tool":
        name = span.get("tool_name") or attrs.get("name") or span.get("name")
        step.title = f"tool call  {name}"
        error = attrs.get("is_error") or span.get("status") == "error"
        step.facts.append(("result", "ERROR" if error else "ok"))
        if attrs.get("duration_ms") is not None:
            step.facts.append(("duration", f"{attrs['duration_ms']} ms"))
        step.texts.append(Text("arguments", _json_text(attrs.get("arguments", attrs.get("input")))))
        step.texts.append(Text("result", _json_text(attrs.get("result", attrs.get("output")))))
    elif kind == "retrieval":
        step.title = f"retrieval  {span.get('name') or ''}"
        docs = attrs.get("documents") or []
        if docs:
            step.facts.append(
                ("documents", ", ".join(f"{d.get('doc_id') or d.get('id')} ({d.get('score')})" for d in docs))
            )
        else:
            step.texts.append(Text("attributes", _json_text(attrs)))
    elif kind == "think":
        step.title = "think"
        step.texts.append(Text("thought", str(attrs.get("text") or _json_text(attrs))))
    elif kind == "state":
        step.title = f"state change  {attrs.get('key') or ''}"
        step.texts.append(Text("value", _json_text(attrs.get("value", attrs))))
    elif kind in ("session_start", "session_end"):
        step.title = kind.replace("_", " ")
        for key, value in attrs.items():
            step.facts.append((key, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)))
    else:
        step.title = f"{kind}  {span.get('name') or ''}"
        if attrs:
            step.texts.append(Text("attributes", _json_text(attrs)))


def _order(span: dict[str, Any]) -> tuple:
    index = span.get("step_index")
    at = span.get("occurred_at")
    return (
        index is None,
        index if index is not None else 0,
        at is None,
        at or datetime.min,
        KIND_ORDER.get(span.get("kind"), 9),
    )


def _step_of(row: dict[str, Any]) -> int | None:
    for key in ("step_index", "affected_step"):
        if row.get(key) is not None:
            return int(row[key])
    return None


def _finding_text(row: dict[str, Any]) -> str:
    """One judge finding or state violation (the judge stage's columns, issue 11)."""
    kind = row.get("error_class") or row.get("code") or "finding"
    detector, version = row.get("detector"), row.get("detector_version") or row.get("validator_version")
    by = f" by {detector}{'@' + str(version) if version else ''}" if detector else ""
    confidence = f" confidence {row['confidence']:.2f}" if isinstance(row.get("confidence"), float) else ""
    cause = row.get("cause_step")
    caused = f" (caused at step {cause})" if cause is not None and cause != row.get("affected_step") else ""
    expected = " (expected, not an error)" if row.get("is_error") is False else ""
    evidence = row.get("evidence") or row.get("detail") or ""
    return f"{kind}{by}{confidence}{caused}{expected}" + (f": {evidence}" if evidence else "")


def _is_first(row: dict[str, Any]) -> bool:
    return bool(row.get("first_in_trace") or row.get("is_first"))


def build_timeline(record: dict[str, Any]) -> Timeline:
    """The timeline of one trace from `tables.read_trace`'s record."""
    calls = {c["call_id"]: c for c in record["calls"]}
    spans = sorted(record["spans"], key=_order)
    steps: list[Step] = []
    seen_calls: set[str] = set()
    for position, span in enumerate(spans):
        index = span.get("step_index")
        step = Step(
            number=int(index) if index is not None else position,
            kind=span.get("kind") or "other",
            title=span.get("name") or "",
            at=span.get("occurred_at"),
            status=span.get("status"),
        )
        if step.kind == "llm_call":
            call = calls.get(span.get("call_id") or "")
            _llm_step(step, call)
            if call:
                seen_calls.add(call["call_id"])
        else:
            _span_step(step, span)
        steps.append(step)
    # calls with no span of their own (some sources log only calls)
    for call in sorted((c for c in calls.values() if c["call_id"] not in seen_calls), key=lambda c: c["occurred_at"]):
        step = Step(len(steps), "llm_call", "", call.get("occurred_at"), call.get("status"))
        _llm_step(step, call)
        steps.append(step)

    by_number = {s.number: s for s in steps}
    unplaced: list[str] = []
    violations = sorted(record.get("violations") or [], key=lambda r: (_step_of(r) is None, _step_of(r) or 0))
    first = next((v for v in violations if _is_first(v)), violations[0] if violations else None)
    for row in violations:
        target = by_number.get(_step_of(row))
        text = _finding_text(row)
        if target is None:
            unplaced.append(f"state violation {text}")
            continue
        target.violations.append(text)
        if row is first:
            target.first_violation = True
    for row in record.get("semantic_errors") or []:
        target = by_number.get(_step_of(row))
        (target.findings if target else unplaced).append(_finding_text(row))

    trace = record.get("trace") or {}
    first_call = next(iter(calls.values()), {})
    facts = [
        ("trace", trace.get("trace_id") or first_call.get("trace_id") or ""),
        ("session", trace.get("session_id") or first_call.get("session_id") or "-"),
        ("user", trace.get("user_id") or first_call.get("user_id") or "-"),
        ("service", trace.get("service") or first_call.get("service") or "-"),
        ("started", str(trace.get("started_at") or first_call.get("occurred_at") or "-")),
        ("outcome", str(trace.get("outcome") or "-")),
        ("feedback", "negative" if trace.get("negative_feedback") else "-"),
        ("calls / steps", f"{trace.get('call_count', len(calls))} / {len(steps)}"),
        ("tokens", str(trace.get("total_tokens") or 0)),
        ("cost", f"${trace.get('cost_usd') or 0:.4f}"),
    ]
    return Timeline(trace_id=facts[0][1], facts=facts, steps=steps, unplaced_findings=unplaced)
