"""`tracelake siblings CALL_ID`: known-good calls like a bad one, ranked by how
few things differ, and the numbered list of those differences.

A sibling has the same route, template version and tool set, a similar
number of request blocks, input tokens within 20%, and a good outcome (no
error, no negative feedback, not cut off at max tokens); the same day comes
first. Differences are named at the level a person changes things: the
model, each param, the tools, each template variable, each retrieved
document (by rank), each message, and the system prompt only when the
template itself differs. Each one knows how to carry the good call's value
into a request (ablation.py uses that to reverse it).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import polars as pl

from pipelines.debug.tables import Tables
from pipelines.ingest.traces import negative_feedback
from pipelines.record.canonical import REQUEST_BLOCKS, canonical_json

TOKEN_TOLERANCE = 0.20
BAD_FINISH = ("length", "max_tokens")
# at most this many candidates (nearest in input tokens) get a full difference list
MAX_COMPARED = 400


@dataclass(frozen=True)
class Difference:
    number: int
    kind: str  # model | param | tools | variable | document | message | system
    key: str  # the param or variable name, the document rank, the message index
    block: str  # the canonical request block it lives in
    bad: Any
    good: Any

    @property
    def label(self) -> str:
        if self.kind == "document":
            return (
                f"retrieved document at rank {self.key}: {_doc_name(self.bad)} (bad) vs {_doc_name(self.good)} (good)"
            )
        if self.kind == "message":
            return f"message {self.key} ({_role(self.bad, self.good)}) differs"
        if self.kind in ("param", "variable"):
            return f"{self.kind} {self.key}: {_short(self.bad)} (bad) vs {_short(self.good)} (good)"
        if self.kind == "model":
            return f"model: {self.bad} (bad) vs {self.good} (good)"
        return f"{self.kind} differs"


def _doc_name(doc: dict | None) -> str:
    return doc["doc_id"] if doc else "(none)"


def _role(*messages: dict | None) -> str:
    return next((m.get("role") for m in messages if m), "?")


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass
class Sibling:
    call: dict[str, Any]
    differences: list[Difference]
    same_day: bool
    token_delta: float


def input_tokens(call: dict[str, Any]) -> int:
    usage = call.get("usage") or {}
    return sum(usage.get(k) or 0 for k in ("input_tokens", "cache_read_input_tokens", "cache_write_input_tokens"))


def _request(call: dict[str, Any]) -> dict[str, Any]:
    return json.loads(call.get("request_json") or "{}")


def _documents(call: dict[str, Any]) -> list[dict[str, Any]]:
    docs = ((call.get("retrieval") or {}).get("documents")) or []
    return sorted(docs, key=lambda d: (d.get("rank") is None, d.get("rank") or 0))


def _variables(call: dict[str, Any]) -> dict[str, Any]:
    try:
        value = json.loads(call.get("template_variables_json") or "null")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _tool_names(call: dict[str, Any]) -> tuple[str, ...]:
    return tuple(sorted(t.get("name") or "" for t in call.get("tool_definitions") or []))


def block_count(call: dict[str, Any]) -> int:
    return len(call.get("messages") or []) + len(_documents(call))


def differences(bad: dict[str, Any], good: dict[str, Any]) -> list[Difference]:
    """The numbered differences between two calls' requests, bad first."""
    rb, rg = _request(bad), _request(good)
    found: list[tuple[str, str, str, Any, Any]] = []
    if rb.get("model") != rg.get("model"):
        found.append(("model", "model", "model", rb.get("model"), rg.get("model")))
    params_b = {k: v for k, v in rb.items() if k not in REQUEST_BLOCKS}
    params_g = {k: v for k, v in rg.items() if k not in REQUEST_BLOCKS}
    for key in sorted(set(params_b) | set(params_g)):
        if canonical_json(params_b.get(key)) != canonical_json(params_g.get(key)):
            found.append(("param", key, "params", params_b.get(key), params_g.get(key)))
    if canonical_json(rb.get("tools")) != canonical_json(rg.get("tools")):
        found.append(("tools", "tools", "tools", rb.get("tools"), rg.get("tools")))
    same_template = (bad.get("template_id"), bad.get("template_version")) == (
        good.get("template_id"),
        good.get("template_version"),
    ) and bad.get("template_version") is not None
    vb, vg = _variables(bad), _variables(good)
    if same_template and (vb or vg or _documents(bad) or _documents(good)):
        for key in sorted(set(vb) | set(vg)):
            if vb.get(key) != vg.get(key):
                found.append(("variable", key, "system", vb.get(key), vg.get(key)))
    elif rb.get("system") != rg.get("system"):
        found.append(("system", "system", "system", rb.get("system"), rg.get("system")))
    db, dg = _documents(bad), _documents(good)
    for i in range(max(len(db), len(dg))):
        a = db[i] if i < len(db) else None
        b = dg[i] if i < len(dg) else None
        if (a or {}).get("doc_id") != (b or {}).get("doc_id") or (a or {}).get("text") != (b or {}).get("text"):
            found.append(("document", str(i + 1), f"document:{(a or b)['doc_id']}", a, b))
    mb, mg = rb.get("messages") or [], rg.get("messages") or []
    for i in range(max(len(mb), len(mg))):
        a = mb[i] if i < len(mb) else None
        b = mg[i] if i < len(mg) else None
        if canonical_json(a) != canonical_json(b):
            found.append(("message", str(i), f"messages[{i}]", a, b))
    return [Difference(n, *item) for n, item in enumerate(found, start=1)]


def _candidates(warehouse: Tables, bad: dict[str, Any], days: list) -> pl.DataFrame:
    tokens = input_tokens(bad)
    total_in = (
        pl.col("usage").struct.field("input_tokens").fill_null(0)
        + pl.col("usage").struct.field("cache_read_input_tokens").fill_null(0)
        + pl.col("usage").struct.field("cache_write_input_tokens").fill_null(0)
    )
    same_template = (
        pl.col("template_version").is_null()
        if bad.get("template_version") is None
        else pl.col("template_version") == bad["template_version"]
    )
    frame = (
        warehouse.scan("calls")
        .filter(
            pl.col("occurred_date").is_in(days)
            & (pl.col("service") == bad.get("service"))
            & same_template
            & (pl.col("call_id") != bad["call_id"])
            & (pl.col("status") == "ok")
            & ~pl.col("finish_reason").fill_null("").is_in(BAD_FINISH)
            & ~negative_feedback(pl.col("feedback"))
            & total_in.is_between(tokens * (1 - TOKEN_TOLERANCE), tokens * (1 + TOKEN_TOLERANCE))
        )
        .with_columns((total_in - tokens).abs().alias("_token_delta"))
        .sort("_token_delta", "call_id")
        .head(MAX_COMPARED * 4)
        .collect()
    )
    return frame


def find_siblings(warehouse: Tables, bad: dict[str, Any], limit: int = 5) -> list[Sibling]:
    """Known-good siblings of ``bad``, best first: same day, then fewest differences."""
    day = bad["occurred_date"]
    frame = _candidates(warehouse, bad, [day])
    if frame.height < limit:
        wider = [day + timedelta(days=k) for k in range(-7, 8) if k]
        frame = pl.concat([frame, _candidates(warehouse, bad, wider)], how="vertical_relaxed")
    tools, blocks, tokens = _tool_names(bad), block_count(bad), input_tokens(bad)
    out = []
    for row in frame.head(MAX_COMPARED * 2).to_dicts():
        if _tool_names(row) != tools or abs(block_count(row) - blocks) > 1:
            continue
        out.append(
            Sibling(
                call=row,
                differences=differences(bad, row),
                same_day=row["occurred_date"] == day,
                token_delta=(input_tokens(row) - tokens) / max(1, tokens),
            )
        )
    # call_id last: the same data always gives the same best sibling (an investigation re-run reuses its answers)
    out.sort(key=lambda s: (not s.same_day, len(s.differences), abs(s.token_delta), s.call["call_id"]))
    return out[:limit]


def apply_value(request: dict[str, Any], difference: Difference, value: Any, current: Any) -> dict[str, Any]:
    """``request`` with the ingredient ``difference`` names set to ``value``
    (``current`` is what the request holds there now). Rendered ingredients
    (variables, documents) are swapped in the rendered system prompt."""
    out = copy.deepcopy(request)
    if difference.kind == "model":
        out["model"] = value
    elif difference.kind == "param":
        if value is None:
            out.pop(difference.key, None)
        else:
            out[difference.key] = value
    elif difference.kind == "tools":
        if value is None:
            out.pop("tools", None)
        else:
            out["tools"] = value
    elif difference.kind == "system":
        out["system"] = value
    elif difference.kind == "variable":
        out["system"] = _swap(out.get("system"), current, value)
    elif difference.kind == "document":
        system = out.get("system")
        if current is not None:
            system = _swap(system, current.get("text"), value.get("text") if value else "")
            if value is not None:
                system = _swap(system, current.get("doc_id"), value.get("doc_id"))
        out["system"] = system
    elif difference.kind == "message":
        index = int(difference.key)
        messages = out.get("messages") or []
        if value is None:
            del messages[index:]
        elif index < len(messages):
            messages[index] = value
        else:
            messages.append(value)
        out["messages"] = messages
    return out


def _swap(system: Any, old: Any, new: Any) -> Any:
    if old is None or not isinstance(system, str):
        return system
    return system.replace(str(old), "" if new is None else str(new))
