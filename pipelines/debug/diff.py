"""`tracelake diff A B`: where two traces part ways, or how two calls' requests differ.

Two traces of the same input: each step is reduced to its decision (which
tool with which arguments, what answer, what state change); the first step
whose decisions differ is reported with what only each trace did there.

Two calls: their canonical requests split into blocks (record/canonical.py:
model, system, each message, tools, params, and each retrieved document),
compared block by block, with each block's tokens and a readable diff of
the ones that changed (rot/diff.py's block lines).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from pipelines.debug.timeline import Step, Timeline
from pipelines.record.canonical import canonical_json, document_block, request_blocks
from pipelines.rot.diff import block_lines


@dataclass
class StepDivergence:
    step_a: Step | None
    step_b: Step | None
    only_a: list[str]
    only_b: list[str]
    common_steps: int


def decisions(step: Step) -> list[str]:
    """What a step decided, as comparable strings (ids and timings left out)."""
    if step.kind == "llm_call":
        return [f"{t.label}: {t.value}" for t in step.texts if t.label == "output"] + [
            f"finish: {v}" for k, v in step.facts if k == "finish"
        ]
    if step.kind in ("tool", "state", "think", "retrieval"):
        return (
            [f"{step.title}"]
            + [f"{t.label}: {t.value}" for t in step.texts]
            + [f"{k}: {v}" for k, v in step.facts if k in ("result", "documents")]
        )
    if step.kind == "session_end":
        return [f"{k}: {v}" for k, v in step.facts]
    return [step.title]


def diff_traces(a: Timeline, b: Timeline) -> StepDivergence | None:
    """The first step where the two timelines decide differently; None when they never do."""
    steps_a = [s for s in a.steps if s.kind != "session_start"]
    steps_b = [s for s in b.steps if s.kind != "session_start"]
    for i in range(max(len(steps_a), len(steps_b))):
        sa = steps_a[i] if i < len(steps_a) else None
        sb = steps_b[i] if i < len(steps_b) else None
        da = decisions(sa) if sa else []
        db = decisions(sb) if sb else []
        if sa is None or sb is None or sa.kind != sb.kind or da != db:
            return StepDivergence(sa, sb, [d for d in da if d not in db], [d for d in db if d not in da], i)
    return None


@dataclass
class BlockDiff:
    block: str
    status: str  # same | changed | only_a | only_b
    tokens_a: int | None
    tokens_b: int | None
    lines: list[str] = field(default_factory=list)


def call_blocks(call: dict[str, Any]) -> dict[str, Any]:
    """A call's request as named blocks, its retrieved documents included."""
    request = json.loads(call.get("request_json") or "{}")
    blocks = request_blocks(request)
    for doc in ((call.get("retrieval") or {}).get("documents")) or []:
        blocks[f"document:{doc['doc_id']}"] = document_block(doc["doc_id"], doc.get("text"))
    return blocks


def block_tokens(call: dict[str, Any], blocks: dict[str, Any]) -> dict[str, int]:
    """Tokens per block: as recorded where the source gave them, else estimated
    (4 characters a token, the estimate the ingest uses for unknown counts)."""
    recorded = {h["block"]: h["tokens"] for h in call.get("block_hashes") or [] if h.get("tokens") is not None}
    for doc in ((call.get("retrieval") or {}).get("documents")) or []:
        if doc.get("tokens") is not None:
            recorded.setdefault(f"document:{doc['doc_id']}", doc["tokens"])
    return {name: recorded.get(name, max(1, len(canonical_json(block)) // 4)) for name, block in blocks.items()}


def diff_calls(a: dict[str, Any], b: dict[str, Any], context: int = 1) -> list[BlockDiff]:
    blocks_a, blocks_b = call_blocks(a), call_blocks(b)
    tokens_a, tokens_b = block_tokens(a, blocks_a), block_tokens(b, blocks_b)
    names = list(blocks_a) + [n for n in blocks_b if n not in blocks_a]
    out = []
    for name in names:
        in_a, in_b = name in blocks_a, name in blocks_b
        if in_a and in_b and canonical_json(blocks_a[name]) == canonical_json(blocks_b[name]):
            out.append(BlockDiff(name, "same", tokens_a[name], tokens_b[name]))
            continue
        status = "changed" if in_a and in_b else ("only_a" if in_a else "only_b")
        lines = list(
            difflib.unified_diff(
                block_lines(blocks_a.get(name)),
                block_lines(blocks_b.get(name)),
                fromfile=f"{name} (A)" if in_a else f"{name} (not in A)",
                tofile=f"{name} (B)" if in_b else f"{name} (not in B)",
                n=context,
                lineterm="",
            )
        )
        out.append(BlockDiff(name, status, tokens_a.get(name), tokens_b.get(name), lines))
    return out
