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

Components are found by block (DESIGN.md hashing spec): model, params and
tools compare directly. A moved system prompt is explained by the documents
it printed (their recorded texts against today's index) and by the template
(rendered again with the recorded document texts: if that reproduces the
recorded system prompt, the template did not change). The user's messages are
never re-rendered: they come from the record, which is also why redacting
them does not make a call look rotted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from pipelines.record.canonical import canonical_json, request_blocks, sha256_hex
from pipelines.rot.ingredients import Ingredients, TemplateVersion
from pipelines.rot.redaction import RedactionView, no_redaction
from pipelines.rot.rerender import DocRef, Renderer, SystemRender, canonical_object

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


def _recorded_hashes(call: Mapping[str, Any], request: Mapping[str, Any]) -> dict[str, str]:
    rows = call.get("block_hashes")
    if rows:
        return {r["block"]: r["sha256"] for r in rows}
    # rows ingested before block hashes existed: compute them from the record
    hashes = {name: sha256_hex(canonical_json(value)) for name, value in request_blocks(request).items()}
    for doc in _recorded_documents(call):
        if doc.get("text") is not None:
            hashes[f"document:{doc['doc_id']}"] = sha256_hex(
                canonical_json({"doc_id": doc["doc_id"], "text": doc["text"]})
            )
    return hashes


def _params_of(request: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k not in REQUEST_KEYS}


class Checker:
    """Checks calls against one snapshot of the ingredient stores, at one clock.

    ``today`` is the day aliases are resolved on; ``clock`` is what a template's
    ``now()`` returns (the impurity probe shifts it). ``redaction`` tells how the
    stored rows were redacted (see ``pipelines.rot.redaction``).
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
        self.redaction = redaction or no_redaction()
        self.keep_blocks = keep_blocks

    def check_all(self, calls: Iterable[Mapping[str, Any]]) -> list[RotCheck]:
        return [self.check(call) for call in calls]

    def check(self, call: Mapping[str, Any]) -> RotCheck:
        call = self.redaction.prepare(call)
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
        decrypted = bool(call.get("_decrypted"))
        redacted = self.redaction.is_redacted(call) and not decrypted
        result.replay_fidelity = EXACT if self._full_bytes_retained(call, redacted) else APPROXIMATE

        request = json.loads(call["request_json"]) if call.get("request_json") else None
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
        if not self._record_matches_hash(call, request):
            # The recorded body is not the one the hash witnessed (the app logged
            # other bytes than it sent): its blocks prove nothing.
            result.missing = ["request_matching_hash"]
            result.detail.append("the recorded request does not hash to rendered_request_sha256")
            return result

        template = self.ingredients.template(result.template_id, result.template_version)
        docs = _recorded_documents(call)
        if template is not None:
            result.template_sha256 = template.sha256
            if template.uses_documents and not docs:
                result.missing = ["doc_ids"]
                return result
            if call.get("template_variables_json") is None and template.variables:
                result.missing = ["template_variables"]
                return result
        self._compare(call, request, template, docs, redacted, decrypted, result)
        if result.status == VERIFIED and result.basis in (FULL_REQUEST, DECRYPTED_VALUES):
            result.replay_fidelity = EXACT
        return result

    # -- the record ---------------------------------------------------------

    def _record_matches_hash(self, call: Mapping[str, Any], request: Mapping[str, Any]) -> bool:
        flag = call.get("request_hash_matches")
        if flag is not None:
            return bool(flag)
        stored = call.get("request_sha256")
        if stored is None and self.redaction.is_redacted(call):
            return True  # a redacted body cannot be re-hashed; nothing says it disagrees
        return (stored or sha256_hex(canonical_json(request))) == call["rendered_request_sha256"]

    def _full_bytes_retained(self, call: Mapping[str, Any], redacted: bool) -> bool:
        return bool(
            call.get("request_json")
            and call.get("rendered_request_sha256")
            and call.get("request_hash_matches") is not False
            and (call.get("request_sha256") in (None, call["rendered_request_sha256"]))
            and not redacted
            and call.get("context_complete") is not False
            and not call.get("truncated")
        )

    # -- re-render and compare ------------------------------------------------

    def _compare(
        self,
        call: Mapping[str, Any],
        request: Mapping[str, Any],
        template: TemplateVersion | None,
        docs: Sequence[Mapping[str, Any]],
        redacted: bool,
        decrypted: bool,
        result: RotCheck,
    ) -> None:
        ing = self.ingredients
        recorded = _recorded_hashes(call, request)
        blocks = request_blocks(request) if self.keep_blocks else {}

        # model: the alias resolved today; a call without an alias named a model directly
        alias = call.get("model_alias")
        model = ing.resolve_model(alias, self.today) if alias else request.get("model")
        result.model_snapshot = model
        # params: the template version's defaults, overridden by the route's config
        route = ing.route_params(call.get("service"))
        params = {**(template.params if template else {}), **(route or {})}
        tools = template.tools if template else None

        current = [DocRef(d["doc_id"], ing.documents.get(d["doc_id"]), d.get("score")) for d in docs]
        present = tuple(d for d in current if d.text is not None)
        system = self.renderer.system(template, call.get("template_variables_json"), present) if template else None

        pieces: dict[str, str] = {}
        if model is not None:
            pieces["model"] = json.dumps(model, ensure_ascii=False)
        if system is not None and system.canonical is not None:
            pieces["system"] = system.canonical
        # from the record: canonical JSON already (dicts hold no None), so dumps suffices
        pieces["messages"] = json.dumps(
            request.get("messages") or [], sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        if tools:
            pieces["tools"] = self.renderer.canonical(
                "tools", (template.sha256, template.template_id, template.version), tools
            )
        params_key = (call.get("service"), template.sha256 if template else None)
        param_pieces = {
            k: self.renderer.canonical("param", (params_key, k), v) for k, v in params.items() if v is not None
        }
        pieces.update(param_pieces)
        if request.get("metadata"):
            pieces["metadata"] = canonical_json(request["metadata"])

        rendered_ok = template is not None and system is not None and system.canonical is not None and model is not None
        if rendered_ok:
            result.rerendered_sha256 = sha256_hex(canonical_object(pieces))
        whole_comparable = not redacted
        if (
            rendered_ok
            and not system.impure
            and whole_comparable
            and result.rerendered_sha256 == result.recorded_sha256
        ):
            result.status, result.basis = VERIFIED, (DECRYPTED_VALUES if decrypted else FULL_REQUEST)
            return

        # Something differs (or only blocks can be compared): find which blocks moved.
        moved: dict[str, str] = {}  # block -> component
        notes: list[str] = []
        keyed: list[bool] = []

        def differs(block: str, canonical: str | None) -> bool:
            want = recorded.get(block)
            if canonical is None or want is None:
                return (canonical is None) != (want is None)
            if self.redaction.is_keyed(call, block):
                keyed.append(True)
                return self.redaction.keyed_sha256(block, canonical) != want
            return sha256_hex(canonical) != want

        if differs("model", pieces.get("model")):
            moved["model"] = "model_alias_moved"
            target = f"alias {alias}" if alias else "the model"
            notes.append(f"model: {target} now resolves to {model or f'nothing on {self.today}'}")
        if differs("params", canonical_object(param_pieces) if param_pieces else None):
            moved["params"] = "params_changed"
            was = _params_of(request)
            keys = sorted(k for k in set(params) | set(was) if params.get(k) != was.get(k))
            config = "" if route is not None else " (the route is not in params.yaml)"
            notes.append(f"params: route {call.get('service')}{config} differs in {', '.join(keys) or 'values'}")
        system_moved = False
        if template is None:
            moved["system"] = "template_missing"
            notes.append(f"system: template {result.template_id} {result.template_version} is not in the store")
        else:
            if differs("tools", pieces.get("tools")):
                moved["tools"] = "tools_changed"
                notes.append(f"tools: template {template.template_id} {template.version} defines other tools")
            if system.error is not None:
                moved["system"] = "template_changed"
                notes.append(f"system: {template.template_id} {template.version} does not render: {system.error}")
            elif system.impure:
                notes.append("system: renders differently under another clock and seed (now() or random())")
            elif differs("system", system.canonical):
                system_moved = True
                if self._template_changed(call, template, docs, current, recorded, notes):
                    moved["system"] = "template_changed"
        # documents reach the request only through the system prompt
        if template is None or (template.uses_documents and (system_moved or system.impure or "system" in moved)):
            for ref in current:
                block = f"document:{ref.doc_id}"
                if ref.text is None:
                    moved[block] = "document_missing"
                    notes.append(f"{block}: not in index {ing.index_snapshot}")
                elif self._document_moved(ref, docs, recorded):
                    moved[block] = "document_changed"
                    notes.append(f"{block}: text changed in index {ing.index_snapshot}")
        if system_moved and "system" not in moved:
            moved["system"] = ""  # explained by the documents named above

        if redacted:
            result.basis = KEYED_BLOCK_HASHES if keyed else REDACTED_VALUES
        else:
            result.basis = DECRYPTED_VALUES if decrypted else FULL_REQUEST
        result.components = sorted({c for c in moved.values() if c}, key=COMPONENTS.index)
        result.rotted_blocks = sorted(moved)
        result.detail.extend(notes)
        if template is not None and system.impure:
            result.status = IMPURE
        elif result.components:
            result.status = ROTTED
        elif rendered_ok and not whole_comparable and not system_moved:
            result.status = VERIFIED  # every ingredient block reproduces; the whole hash cannot be taken
        else:
            result.status = ROTTED
            result.detail.append("the request differs but no ingredient could be named")
        if self.keep_blocks:
            self._keep(blocks, moved, pieces, params, system, current, docs, result)

    def _document_moved(self, ref: DocRef, docs: Sequence[Mapping[str, Any]], recorded: Mapping[str, str]) -> bool:
        want = recorded.get(f"document:{ref.doc_id}")
        if want is not None:
            return self.renderer.document_sha256(ref.doc_id, ref.text) != want
        doc = next(d for d in docs if d["doc_id"] == ref.doc_id)
        if doc.get("text_sha256"):
            return sha256_hex(ref.text) != doc["text_sha256"]
        return False  # nothing recorded to compare with: not evidence of a change

    def _template_changed(
        self,
        call: Mapping[str, Any],
        template: TemplateVersion,
        docs: Sequence[Mapping[str, Any]],
        current: Sequence[DocRef],
        recorded: Mapping[str, str],
        notes: list[str],
    ) -> bool:
        """The system prompt moved: did the template change? Render it again with the
        documents as recorded; if that reproduces the recorded prompt, it did not."""
        name = f"template {template.template_id} {template.version}"
        as_recorded = tuple(DocRef(d["doc_id"], d.get("text"), d.get("score")) for d in docs)
        if template.uses_documents and any(d.text is None for d in as_recorded):
            # without the recorded texts the template cannot be rendered as it was
            if any(ref.text is None or self._document_moved(ref, docs, recorded) for ref in current):
                notes.append(f"system: document texts were not recorded, so a change to {name} cannot be told apart")
                return False
            notes.append(f"system: {name} renders differently than recorded")
            return True
        variables = call.get("template_variables_json")
        again = self.renderer.system(template, variables, as_recorded if template.uses_documents else ())
        if again.canonical is not None:
            want = recorded.get("system")
            if self.redaction.is_keyed(call, "system"):
                if self.redaction.keyed_sha256("system", again.canonical) == want:
                    return False
            elif again.sha256 == want:
                return False
        notes.append(f"system: {name} renders differently than recorded")
        return True

    def _keep(self, blocks, moved, pieces, params, system: SystemRender | None, current, docs, result) -> None:
        """Recorded and re-rendered values of the moved blocks, for diffs."""
        recorded_docs = {d["doc_id"]: d.get("text") for d in docs}
        current_docs = {d.doc_id: d.text for d in current}
        for block in moved:
            if block.startswith("document:"):
                doc_id = block.removeprefix("document:")
                result.recorded_blocks[block] = recorded_docs.get(doc_id)
                result.rerendered_blocks[block] = current_docs.get(doc_id)
                continue
            result.recorded_blocks[block] = blocks.get(block)
            if block == "system":
                result.rerendered_blocks[block] = system.text if system else None
            elif block == "params":
                result.rerendered_blocks[block] = {k: v for k, v in params.items() if v is not None} or None
            else:
                result.rerendered_blocks[block] = json.loads(pieces[block]) if block in pieces else None
