"""The rot check of one call: re-render its ingredients today, compare with what
was recorded, and say whether the request still reproduces and, if not, which
pointer rotted.

Statuses:

- ``verified``: the re-rendered request hashes to the recorded
  ``rendered_request_sha256``.
- ``rotted``: it does not; ``components`` names the ingredients whose blocks
  moved (``template_changed``, ``template_missing``, ``document_changed``,
  ``document_missing``, ``model_alias_moved``, ``params_changed``,
  ``tools_changed``) and nothing else.
- ``impure``: the template renders differently under two clocks and seeds, so
  no hash comparison can mean anything; other blocks are still compared.
- ``unverifiable``: an ingredient needed to re-render is not in the record;
  ``missing`` says which.

Components are found by block (docs/architecture.md, the hashing spec): model, params and
tools compare directly. A moved system prompt is explained by the documents
it printed (their recorded texts against today's index) and by the template
(rendered again with the recorded document texts: if that reproduces the
recorded system prompt, the template did not change). The user's messages are
never re-rendered: they come from the record, which is also why redacting
them does not make a call look rotted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from pipelines.record.canonical import canonical_json, document_block, request_blocks, sha256_hex
from pipelines.rot.ingredients import Ingredients, TemplateVersion
from pipelines.rot.redaction import DECRYPTED, RAW, REDACTED, RedactionView
from pipelines.rot.rerender import Renderer, Rerendered, canonical_object, rerender_request
from pipelines.rot.template_inputs import DocRef

VERIFIED, ROTTED, IMPURE, UNVERIFIABLE = "verified", "rotted", "impure", "unverifiable"
STATUSES = (VERIFIED, ROTTED, IMPURE, UNVERIFIABLE)
COMPONENTS = (
    "template_changed",
    "template_missing",
    "document_changed",
    "document_missing",
    "model_alias_moved",
    "params_changed",
    "tools_changed",
)
# What a comparison could rest on (the ``basis`` column).
FULL_REQUEST = "full_request"  # the whole canonical request, re-rendered and hashed
DECRYPTED_VALUES = "decrypted_values"  # the same, after decrypting encrypt-mode redaction
KEYED_BLOCK_HASHES = "keyed_block_hashes"  # per block; PII-bearing blocks through keyed HMAC hashes
REDACTED_VALUES = "redacted_values"  # per block, on text that still holds redaction placeholders
NO_BASIS = "none"  # nothing was compared
EXACT, APPROXIMATE = "exact", "approximate"

# The calls columns the check reads.
CALL_COLUMNS = (
    "call_id",
    "trace_id",
    "service",
    "occurred_date",
    "template_id",
    "template_version",
    "template_variables_json",
    "model_alias",
    "request_model",
    "request_json",
    "rendered_request_sha256",
    "request_sha256",
    "request_hash_matches",
    "block_hashes",
    "retrieval",
    "context_complete",
    "truncated",
    "flags",
    # the stored ingredient-set key (pipelines.record.set_key); only the grouped check reads it
    "rot_set_key",
)
REQUEST_KEYS = ("model", "system", "messages", "tools", "metadata")


@dataclass
class RotCheck:
    """The verdict on one call, with the store versions it was reached against."""

    call_id: str
    trace_id: str | None
    service: str | None
    occurred_date: date | None
    status: str
    components: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    rotted_blocks: list[str] = field(default_factory=list)
    basis: str = NO_BASIS
    replay_fidelity: str = APPROXIMATE
    recorded_sha256: str | None = None
    rerendered_sha256: str | None = None
    template_id: str | None = None
    template_version: str | None = None
    template_sha256: str | None = None
    index_snapshot: str | None = None
    model_alias: str | None = None
    model_snapshot: str | None = None
    detail: list[str] = field(default_factory=list)
    # Recorded and re-rendered values of the rotted blocks, kept only when asked
    # (the CLI diffs them); never written to a table.
    recorded_blocks: dict[str, Any] = field(default_factory=dict)
    rerendered_blocks: dict[str, Any] = field(default_factory=dict)


def _recorded_documents(call: Mapping[str, Any]) -> list[dict[str, Any]]:
    docs = list((call.get("retrieval") or {}).get("documents") or [])
    return sorted(docs, key=lambda d: (d.get("rank") is None, d.get("rank") or 0))


def _recorded_hashes(call: Mapping[str, Any], request: Mapping[str, Any]) -> dict[str, tuple[str, str | None]]:
    """block -> (hash, algorithm) as recorded."""
    rows = call.get("block_hashes")
    if rows:
        return {r["block"]: (r["sha256"], r.get("algorithm")) for r in rows}
    # rows ingested before block hashes existed: compute them from the record
    hashes = {name: (sha256_hex(canonical_json(value)), None) for name, value in request_blocks(request).items()}
    for doc in _recorded_documents(call):
        if doc.get("text") is not None:
            block = canonical_json(document_block(doc["doc_id"], doc["text"]))
            hashes[f"document:{doc['doc_id']}"] = (sha256_hex(block), None)
    return hashes


def _params_of(request: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k not in REQUEST_KEYS}


class Checker:
    """Checks calls against one snapshot of the ingredient stores, at one clock.

    ``clock`` is the check's time: aliases resolve on its day, and a template's
    ``now()`` returns it (the impurity probe shifts it). ``redaction`` says which
    stored calls were redacted and holds the keys (see ``pipelines.rot.redaction``).
    ``keep_blocks`` keeps the recorded and re-rendered values of moved blocks for diffs.
    """

    def __init__(
        self,
        ingredients: Ingredients,
        clock: datetime,
        *,
        redaction: RedactionView | None = None,
        keep_blocks: bool = False,
    ):
        self.ingredients = ingredients
        self.clock = clock
        self.today = clock.date()
        self.renderer = Renderer(clock)
        self.redaction = redaction or RedactionView()
        self.keep_blocks = keep_blocks

    def check_all(self, calls: Iterable[Mapping[str, Any]]) -> list[RotCheck]:
        return [self.check(call) for call in calls]

    def check(self, call: Mapping[str, Any]) -> RotCheck:
        call, state = self.redaction.prepare(call)
        result = RotCheck(
            call_id=call["call_id"],
            trace_id=call.get("trace_id"),
            service=call.get("service"),
            occurred_date=call.get("occurred_date"),
            status=UNVERIFIABLE,
            recorded_sha256=call.get("rendered_request_sha256"),
            template_id=call.get("template_id"),
            template_version=call.get("template_version"),
            index_snapshot=self.ingredients.index_snapshot,
            model_alias=call.get("model_alias"),
        )
        request = json.loads(call["request_json"]) if call.get("request_json") else None
        result.replay_fidelity = EXACT if self._full_bytes_retained(call, request, state) else APPROXIMATE

        missing = []
        if not result.recorded_sha256:
            missing.append("recorded_hash")
        if not result.template_id or not result.template_version:
            missing.append("template_version")
        if request is None:
            missing.append("request")
        if missing:
            result.missing = missing
            return result
        if call.get("request_hash_matches") is False:
            # The recorded body is not the one the hash witnessed (the app logged
            # other bytes than it sent): its blocks prove nothing.
            result.missing = ["request_matching_hash"]
            result.detail.append("the recorded request does not hash to rendered_request_sha256")
            return result
        if not self.redaction.keyed_hashes_usable(call):
            result.missing = ["hash_key"]
            result.detail.append("block hashes were keyed with another hash key; set the one redaction used")
            return result

        self.judge(call, request, _recorded_documents(call), state, result)
        return result

    def judge(
        self,
        call: Mapping[str, Any],
        request: Mapping[str, Any],
        docs: Sequence[Mapping[str, Any]],
        state: str,
        result: RotCheck,
        reproduces: Callable[[Rerendered], bool] | None = None,
    ) -> Rerendered | None:
        """Re-render a call whose record has what the check needs and fill in ``result``;
        today's request, or None when an ingredient is missing. ``reproduces`` says whether
        today's request is the recorded one; by default its hash is compared (and kept)."""
        template = self.ingredients.template(result.template_id, result.template_version)
        if template is not None:
            result.template_sha256 = template.sha256
            if template.uses_documents and not docs:
                result.missing = ["doc_ids"]
                return None
            if call.get("template_variables_json") is None and template.variables:
                result.missing = ["template_variables"]
                return None

        today = rerender_request(call, request, template, docs, self.ingredients, self.renderer, self.today)
        result.model_snapshot = today.model
        if today.complete:
            if reproduces is None:
                result.rerendered_sha256 = sha256_hex(canonical_object(today.pieces))
                same = result.rerendered_sha256 == result.recorded_sha256
            else:
                same = reproduces(today)
            if state != REDACTED and not today.system.impure and same:
                result.status = VERIFIED
                result.basis = DECRYPTED_VALUES if state == DECRYPTED else FULL_REQUEST
                result.replay_fidelity = EXACT
                return today
        self._compare_blocks(call, request, template, docs, today, state, result)
        return today

    # -- the record ---------------------------------------------------------

    def _full_bytes_retained(self, call: Mapping[str, Any], request: Mapping[str, Any] | None, state: str) -> bool:
        """Can a replay send exactly the bytes the hash witnessed, from the record alone?"""
        recorded = call.get("rendered_request_sha256")
        if request is None or not recorded or state == REDACTED:
            return False
        if call.get("context_complete") is False or call.get("truncated"):
            return False
        if state == DECRYPTED:
            return sha256_hex(canonical_json(request)) == recorded
        return call.get("request_hash_matches") is not False and call.get("request_sha256") in (None, recorded)

    # -- compare block by block ----------------------------------------------

    def _compare_blocks(
        self,
        call: Mapping[str, Any],
        request: Mapping[str, Any],
        template: TemplateVersion | None,
        docs: Sequence[Mapping[str, Any]],
        today: Rerendered,
        state: str,
        result: RotCheck,
    ) -> None:
        recorded = _recorded_hashes(call, request)
        redacted = state == REDACTED
        moved: dict[str, str] = {}  # block -> component ("" when the documents explain it)
        notes: list[str] = []

        def differs(block: str, canonical: str | None) -> bool:
            want = recorded.get(block)
            if canonical is None or want is None:
                return (canonical is None) != (want is None)
            return not self.redaction.matches(want[0], want[1], canonical)

        alias = call.get("model_alias")
        if differs("model", today.pieces.get("model")):
            moved["model"] = "model_alias_moved"
            target = f"alias {alias}" if alias else "the model"
            notes.append(f"model: {target} now resolves to {today.model or f'nothing on {self.today}'}")
        if template is None:
            # the version's metadata may have set params and tools: without it they prove nothing
            notes.append("params, tools: not compared; they depend on the missing template version")
        elif differs("params", canonical_object(today.param_pieces) if today.param_pieces else None):
            moved["params"] = "params_changed"
            was = _params_of(request)
            keys = sorted(k for k in set(today.params) | set(was) if today.params.get(k) != was.get(k))
            config = "" if today.route_known else " (the route is not in params.yaml)"
            notes.append(f"params: route {call.get('service')}{config} differs in {', '.join(keys) or 'values'}")

        system = today.system
        system_moved = False
        variables_unknown = (
            redacted and bool(template and template.variables) and self.redaction.variables_redacted(call)
        )
        if template is None:
            moved["system"] = "template_missing"
            notes.append(f"system: template {result.template_id} {result.template_version} is not in the store")
        else:
            name = f"template {template.template_id} {template.version}"
            if differs("tools", today.pieces.get("tools")):
                moved["tools"] = "tools_changed"
                notes.append(f"tools: {name} defines other tools")
            if system.error is not None and not variables_unknown:
                moved["system"] = "template_changed"
                notes.append(f"system: {name} does not render: {system.error}")
            elif system.impure:
                notes.append("system: renders differently under another clock and seed (now() or random())")
            elif system.error is not None or differs("system", system.canonical):
                system_moved = True
                if variables_unknown:
                    notes.append("system: the template variables were redacted, so the template cannot be judged")
                else:
                    docs_usable = not (redacted and self.redaction.documents_redacted(call))
                    if self._template_changed(call, template, docs, today.current, recorded, docs_usable, notes):
                        moved["system"] = "template_changed"
        # documents reach the request only through the system prompt
        if template is None or (template.uses_documents and (system_moved or system.impure or "system" in moved)):
            self._documents_moved(today.current, recorded, moved, notes)
        if system_moved and "system" not in moved:
            moved["system"] = ""

        if state == REDACTED:
            keyed = any((recorded.get(b) or ("", None))[1] not in (None, "sha256") for b in ("system", *moved))
            result.basis = KEYED_BLOCK_HASHES if keyed else REDACTED_VALUES
        else:
            result.basis = DECRYPTED_VALUES if state == DECRYPTED else FULL_REQUEST
        result.components = sorted({c for c in moved.values() if c}, key=COMPONENTS.index)
        result.rotted_blocks = sorted(moved)
        result.detail.extend(notes)
        if template is not None and system.impure:
            result.status = IMPURE
        elif result.components:
            result.status = ROTTED
        elif system_moved and variables_unknown:
            result.status, result.missing = UNVERIFIABLE, ["template_variables"]
        elif state != RAW and today.complete and not system_moved:
            # every ingredient block reproduces; the messages were redacted, so the
            # whole request cannot be hashed again
            result.status = VERIFIED
        else:
            result.status = ROTTED
            result.detail.append("the request differs but no ingredient could be named")
        if self.keep_blocks:
            self._keep(request, docs, today, moved, result)

    def _documents_moved(
        self,
        current: Sequence[DocRef],
        recorded: Mapping[str, tuple[str, str | None]],
        moved: dict[str, str],
        notes: list[str],
    ) -> None:
        """Name each of today's documents that is missing from the index or changed."""
        for ref in current:
            block = f"document:{ref.doc_id}"
            if ref.text is None:
                moved[block] = "document_missing"
                notes.append(f"{block}: not in index {self.ingredients.index_snapshot}")
            elif self._document_moved(ref, recorded):
                moved[block] = "document_changed"
                notes.append(f"{block}: text changed in index {self.ingredients.index_snapshot}")

    def _document_moved(self, ref: DocRef, recorded: Mapping[str, tuple[str, str | None]]) -> bool:
        want = recorded.get(f"document:{ref.doc_id}")
        if want is None:
            return False  # nothing recorded to compare with: not evidence of a change
        return not self.redaction.matches(want[0], want[1], self.renderer.document_canonical(ref.doc_id, ref.text))

    def _template_changed(
        self,
        call: Mapping[str, Any],
        template: TemplateVersion,
        docs: Sequence[Mapping[str, Any]],
        current: Sequence[DocRef],
        recorded: Mapping[str, tuple[str, str | None]],
        docs_usable: bool,
        notes: list[str],
    ) -> bool:
        """The system prompt moved: did the template change? Render it again with the
        documents as recorded; if that reproduces the recorded prompt, it did not."""
        name = f"template {template.template_id} {template.version}"
        as_recorded = tuple(DocRef(d["doc_id"], d.get("text"), d.get("score")) for d in docs)
        if template.uses_documents and (not docs_usable or any(d.text is None for d in as_recorded)):
            # without the recorded texts the template cannot be rendered as it was
            if any(ref.text is None or self._document_moved(ref, recorded) for ref in current):
                notes.append(
                    f"system: the documents moved and their recorded texts are not usable, so {name} cannot be judged"
                )
                return False
            notes.append(f"system: {name} renders differently than recorded")
            return True
        variables = call.get("template_variables_json")
        again = self.renderer.system(template, variables, as_recorded if template.uses_documents else ())
        want = recorded.get("system")
        if (
            again.canonical is not None
            and want is not None
            and self.redaction.matches(want[0], want[1], again.canonical, again.sha256)
        ):
            return False
        notes.append(f"system: {name} renders differently than recorded")
        return True

    def _keep(
        self,
        request: Mapping[str, Any],
        docs: Sequence[Mapping[str, Any]],
        today: Rerendered,
        moved: Mapping[str, str],
        result: RotCheck,
    ) -> None:
        """Recorded and re-rendered values of the moved blocks, for diffs."""
        blocks = request_blocks(request)
        recorded_docs = {d["doc_id"]: d.get("text") for d in docs}
        current_docs = {d.doc_id: d.text for d in today.current}
        for block in moved:
            if block.startswith("document:"):
                doc_id = block.removeprefix("document:")
                result.recorded_blocks[block] = recorded_docs.get(doc_id)
                result.rerendered_blocks[block] = current_docs.get(doc_id)
                continue
            result.recorded_blocks[block] = blocks.get(block)
            if block == "system":
                result.rerendered_blocks[block] = today.system.text if today.system else None
            elif block == "params":
                result.rerendered_blocks[block] = today.params or None
            else:
                result.rerendered_blocks[block] = json.loads(today.pieces[block]) if block in today.pieces else None
