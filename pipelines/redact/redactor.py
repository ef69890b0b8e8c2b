"""The redactor: canonical rows or raw documents in, redacted ones out.

Three passes over a batch:

1. collect: walk every text-bearing field and gather what the analyzer must
   see, deduplicated by (text, how to look at it): a system prompt or a
   retrieved document repeated across thousands of calls is analyzed once,
   and so is the same message in ``request_json`` and in ``messages``;
2. analyze the texts not seen before in this redactor;
3. apply, trace by trace: each detected value, and every other mention of a
   value detected anywhere in the trace, is replaced by the trace's
   substitution for it.

For `calls` rows the request hash and the keyed block hashes are computed
from the raw request before anything is replaced. A large batch is redacted in
worker processes, whole traces per chunk (``pool.py``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pipelines.collector import gc_paused
from pipelines.record import canonical
from pipelines.record.rows import BOOKKEEPING
from pipelines.redact import nlp
from pipelines.redact.analyzer import DetectorSettings, Hit, Request, TextAnalyzer, detector_versions
from pipelines.redact.audit import AuditContext, audit_row
from pipelines.redact.block_hashes import raw_block_hashes
from pipelines.redact.entities import PERSON
from pipelines.redact.field_rules import FieldRules
from pipelines.redact.identifiers import pseudonymize_row
from pipelines.redact.keys import KeyRing
from pipelines.redact.operator_text import in_operator_line, operator_lines
from pipelines.redact.passes import Apply, Collect, Item
from pipelines.redact.policy import Policy, load_policy
from pipelines.redact.pool import WorkerConfig, WorkerPool
from pipelines.redact.row_fields import walk_row
from pipelines.redact.substitution import TraceSubstitutions, check_mode
from pipelines.redact.template_text import literal_parts
from pipelines.redact.walker import JsonWalker

REDACTED_FLAG = "redacted"
HASH_MISMATCH_FLAG = "request_hash_mismatch"
# shorter values are not looked for elsewhere in the trace ("Ana" inside "Banana")
MIN_PROPAGATED_CHARS = 4
CACHE_LIMIT = 500_000
# texts analyzed at once (NER reads the new lines of a batch as one spaCy batch)
BATCH_TEXTS = 256

# (template_id, version) -> the template's source in the store today; None when it has none
TemplateSource = Callable[[str, str], str | None]
TemplateKey = tuple[str | None, str | None]


@dataclass
class RedactionResult:
    calls: list[dict[str, Any]]
    spans: list[dict[str, Any]]
    audit: list[dict[str, Any]]
    # counts only (texts seen, distinct, analyzed, replacements): safe to log
    stats: dict[str, int] = field(default_factory=dict)


def ner_enabled(policy: Policy, override: bool | None = None) -> bool:
    if override is not None:
        wanted = override
    elif policy.ner.enabled == "auto":
        wanted = nlp.ner_model_version() is not None
    else:
        wanted = policy.ner.enabled == "on"
    if wanted and nlp.ner_model_version() is None:
        nlp.ner_pipeline()  # raises with what to install
    return wanted


def detector_settings(policy: Policy, ner: bool) -> DetectorSettings:
    return DetectorSettings(
        entities=policy.enabled_entities(),
        min_scores={entity: policy.rule(entity).min_score for entity in policy.enabled_entities()},
        phone_regions=tuple(policy.phone_regions),
        ner=ner,
        allow_list=tuple(policy.allow_list),
        chunk_chars=policy.large_field_chars,
    )


def _changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The columns the walk replaced (it returns untouched values as the same objects)."""
    if after is before:
        return {}
    return {key: value for key, value in after.items() if value is not before.get(key)}


def _updated(row: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    if not update:
        return row
    out = {**row, **update}
    out["record_sha256"] = canonical.record_sha256(out, BOOKKEEPING)
    return out


def trace_scope(document: Any) -> str:
    """The trace a raw document belongs to (its top-level trace id); "" when it has none."""
    if isinstance(document, dict):
        for key in ("trace_id", "traceId", "trace"):
            value = document.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool):
                return str(value)
    return ""


def _sort_key(row: dict[str, Any]) -> tuple:
    occurred = row.get("occurred_at")
    return (occurred is None, occurred or datetime.min.replace(tzinfo=UTC), row.get("span_id") or "")


def worker_redactor(config: WorkerConfig) -> Redactor:
    """A worker process's redactor (``pool.WorkerPool`` builds one per worker as it starts:
    the NER model loads then, while the caller still parses)."""
    redactor = Redactor(config.policy, config.mode, config.keys, workers=1, ner=config.ner)
    redactor.analyzer.ner_stats()
    return redactor


class Redactor:
    """Redacts rows and documents under one policy and mode.

    ``workers`` > 1 redacts large batches in that many worker processes.
    Analysis results are cached for the redactor's life, so keep one redactor
    per run. Use it as a context manager, or call ``close()``, to stop the workers.

    ``templates``: where a call's recorded template is looked up. NER reads
    every system prompt; in one rendered from a template found there, a name
    inside the template's own text is kept (``template_text``). Without it, or
    for a template the store does not have, the whole prompt is user text.
    """

    def __init__(
        self,
        policy: Policy | None = None,
        mode: str = "placeholder",
        keys: KeyRing | None = None,
        workers: int = 1,
        *,
        ner: bool | None = None,
        templates: TemplateSource | None = None,
    ):
        self.policy = policy or load_policy()
        self.mode = check_mode(mode)
        self.keys = keys or KeyRing()
        if self.mode == "encrypt":
            self.keys.encryption_key()  # fail now, with what to set, not halfway through a batch
        self.ner = ner_enabled(self.policy, ner)
        self.settings = detector_settings(self.policy, self.ner)
        self.rules = FieldRules(self.policy)
        self.walker = JsonWalker(self.rules)
        self.templates = templates
        # per recorded template: its literal parts (empty: not in the store), and the walker using them
        self.template_text: dict[TemplateKey, tuple[str, ...]] = {}
        # the lines of the batch's system prompts that many users' calls carry (``operator_text``)
        self.operator_lines: frozenset[str] = frozenset()
        self._template_walkers: dict[TemplateKey, JsonWalker] = {}
        config = WorkerConfig(self.policy, self.mode, self.keys, self.ner)
        self.pool = WorkerPool(workers, config, worker_redactor) if workers > 1 else None
        self._analyzer: TextAnalyzer | None = None
        self._cache: dict[Request, list[Hit]] = {}

    def __enter__(self) -> Redactor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()

    def versions(self) -> dict[str, str]:
        return detector_versions(self.ner)

    @property
    def analyzer(self) -> TextAnalyzer:
        if self._analyzer is None:
            self._analyzer = TextAnalyzer(self.settings)
        return self._analyzer

    def in_workers(self, rows: int) -> bool:
        """Whether a batch of this many rows is redacted in worker processes."""
        return self.pool is not None and rows >= self.pool.min_rows

    # -- rows -----------------------------------------------------------------

    def redact_rows(
        self, calls: Sequence[dict[str, Any]], spans: Sequence[dict[str, Any]] = (), *, now: datetime | None = None
    ) -> RedactionResult:
        """Redacted copies of ``calls`` and ``spans`` (same columns, same
        types, same order), and one audit row per call and per span outside any call."""
        now = now or datetime.now(UTC)
        self.look_up_templates(calls)
        self.operator_lines = operator_lines(calls)
        with gc_paused():
            if self.pool is not None and self.in_workers(len(calls) + len(spans)):
                return self._redact_in_workers(self.pool, calls, spans, now)
            call_updates, span_updates, audit, stats = self.redact_columns(calls, spans, now)
            return RedactionResult(
                self._finished(calls, call_updates), self._finished(spans, span_updates), audit, stats
            )

    def _finished(self, rows: Sequence[dict[str, Any]], updates: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Rows with their redacted columns, personal user/session ids, tags and
        segment values pseudonymized (the keyed pseudonym, the same in every
        trace), and record_sha256 recomputed: it describes what is stored, so it
        is no hash of raw text either."""
        return [
            _updated(row, {**update, **pseudonymize_row(row, self.keys)})
            for row, update in zip(rows, updates, strict=True)
        ]

    def redact_columns(
        self, calls: Sequence[dict[str, Any]], spans: Sequence[dict[str, Any]], now: datetime
    ) -> tuple[list[dict], list[dict], list[dict], dict[str, int]]:
        """For each row, the columns redaction changes (only those), the audit
        rows and the stats. Rows need only the text-bearing and hash columns
        (``pool.CALL_COLUMNS``, ``pool.SPAN_COLUMNS``): workers get no more than that."""
        prepared = [self._prepare_call(call) for call in calls]
        public = self.policy.is_public_document if self.policy.public_documents else None
        call_items = [
            Item(call.get("trace_id") or "", lambda v, r=call: walk_row(r, "calls", self._walker_for(r), v, public))
            for call in calls
        ]
        span_items = [
            Item(span.get("trace_id") or "", lambda v, r=span: walk_row(r, "spans", self.walker, v)) for span in spans
        ]
        # placeholders are numbered in the order a trace happened, whatever the input order
        rows = [*calls, *spans]
        items = call_items + span_items
        order = sorted(range(len(rows)), key=lambda i: (_sort_key(rows[i]), i))
        stats = self._redact_items([items[i] for i in order])

        context = self._audit_context(now)
        call_updates, span_updates, audit = [], [], []
        for call, item, (hashes, request_sha, matches) in zip(calls, call_items, prepared, strict=True):
            update = _changes(call, item.result)
            flags = list(call.get("flags") or [])
            if hashes is not None:
                update["block_hashes"] = hashes
            if request_sha is not None:
                update["request_sha256"] = request_sha
                update["request_hash_matches"] = matches
            if matches is False and HASH_MISMATCH_FLAG not in flags:
                flags.append(HASH_MISMATCH_FLAG)
            if item.tally.replacements and REDACTED_FLAG not in flags:
                flags.append(REDACTED_FLAG)
            if flags != list(call.get("flags") or []):
                update["flags"] = flags
            call_updates.append(update)
            audit_flags = [f for f in flags if f == HASH_MISMATCH_FLAG]
            audit.append(audit_row(context, call["call_id"], "calls", call, item.tally, audit_flags))
        for span, item in zip(spans, span_items, strict=True):
            span_updates.append(_changes(span, item.result))
            if span.get("call_id") is None and span.get("attributes_json") is not None:
                audit.append(audit_row(context, span["span_key"], "spans", span, item.tally, []))
        return call_updates, span_updates, audit, stats

    def look_up_templates(self, calls: Iterable[Mapping[str, Any]]) -> None:
        """Learn the literal parts of the templates these calls record, from ``templates``
        (once per template version in a redactor's life; workers are sent what was learnt)."""
        keys = {(call.get("template_id"), call.get("template_version")) for call in calls}
        for key in keys - self.template_text.keys():
            template_id, version = key
            source = self.templates(template_id, version) if self.templates and template_id and version else None
            self.template_text[key] = literal_parts(source) if source else ()

    def _walker_for(self, call: dict[str, Any]) -> JsonWalker:
        """A call rendered from a template the store has: the rules that keep the names of
        the template's own text in its system prompt. Any other call: the default rules."""
        key = (call.get("template_id"), call.get("template_version"))
        walker = self._template_walkers.get(key)
        if walker is None:
            literals = self.template_text.get(key)
            if not literals:
                return self.walker
            walker = self._template_walkers[key] = JsonWalker(FieldRules(self.policy, template_text=literals))
        return walker

    def _redact_in_workers(
        self, pool: WorkerPool, calls: Sequence[dict[str, Any]], spans: Sequence[dict[str, Any]], now: datetime
    ) -> RedactionResult:
        """The same result as in one process: each trace is redacted whole, in one chunk,
        in a worker; its rows are finished here as the chunk comes back."""
        out_calls: list[Any] = [None] * len(calls)
        out_spans: list[Any] = [None] * len(spans)
        audit: list[dict[str, Any]] = []
        stats: dict[str, int] = defaultdict(int)
        for call_at, span_at, (c_updates, s_updates, c_audit, c_stats) in pool.redact_rows(
            calls, spans, now, self.template_text, self.operator_lines
        ):
            for rows, at, updates, out in (
                (calls, call_at, c_updates, out_calls),
                (spans, span_at, s_updates, out_spans),
            ):
                for i, row in zip(at, self._finished([rows[i] for i in at], updates), strict=True):
                    out[i] = row
            audit += c_audit
            for key, value in c_stats.items():
                stats[key] += value
        # audit rows in input order: calls first, then spans, as in one process
        # (an llm_call span's span_key equals its call's call_id: look up per table)
        position = {
            "calls": {row["call_id"]: i for i, row in enumerate(calls)},
            "spans": {row["span_key"]: len(calls) + i for i, row in enumerate(spans)},
        }
        audit.sort(key=lambda row: position[row["source_table"]][row["span_key"]])
        return RedactionResult(out_calls, out_spans, audit, dict(stats))

    def _prepare_call(self, call: dict[str, Any]) -> tuple[list | None, str | None, bool | None]:
        """Hashes of the raw call: keyed block hashes, and the request hash checked
        against the one the application recorded."""
        raw = call.get("request_json")
        request_sha = None
        if raw:
            try:
                request_sha = canonical.request_sha256(json.loads(raw))
            except ValueError:
                request_sha = None
        recorded = call.get("rendered_request_sha256")
        matches = (recorded == request_sha) if recorded and request_sha else call.get("request_hash_matches")
        documents = (call.get("retrieval") or {}).get("documents") or []
        try:
            hashes = raw_block_hashes(
                raw, documents, call.get("block_hashes"), self.keys, self.policy.is_public_document
            )
        except ValueError:
            hashes = call.get("block_hashes")
        return hashes, request_sha, matches

    def _audit_context(self, now: datetime) -> AuditContext:
        return AuditContext(
            mode=self.mode,
            policy_name=self.policy.name,
            policy_version=self.policy.version,
            policy_sha256=self.policy.sha256,
            detector_versions=self.versions(),
            encryption_key_id=self.keys.current_key_id if self.mode == "encrypt" else None,
            hash_key_id=self.keys.hash_key_id,
            redacted_at=now,
        )

    # -- documents ------------------------------------------------------------

    def redact_documents(self, documents: Iterable[Any]) -> list[Any]:
        """Redacted copies of raw trace documents (any JSON), same structure.
        Replacements are consistent within a document's trace id (documents
        without one share a single scope)."""
        documents = list(documents)
        self.operator_lines = frozenset()  # documents record no users: no evidence
        if self.pool is not None and self.in_workers(len(documents)):
            by_scope: dict[str, list[int]] = defaultdict(list)
            for at, doc in enumerate(documents):
                by_scope[trace_scope(doc)].append(at)
            groups = list(by_scope.values())
            out: list[Any] = [None] * len(documents)
            for at, redacted in self.pool.redact_documents([[documents[i] for i in group] for group in groups]):
                for i, doc in zip(groups[at], redacted, strict=True):
                    out[i] = doc
            return out
        items = [Item(trace_scope(doc), lambda v, d=doc: self.walker.walk(d, "", v)) for doc in documents]
        with gc_paused():
            self._redact_items(items)
        return [item.result for item in items]

    # -- the three passes -----------------------------------------------------

    def _redact_items(self, items: Sequence[Item]) -> dict[str, int]:
        """Collect every item's texts, analyze the ones not seen before, then apply trace by trace."""
        ner_before = self.analyzer.ner_stats()
        seen = 0
        for item in items:
            collector = Collect()
            item.walk(collector)
            item.requests, item.sensitive = collector.requests, collector.sensitive
            seen += collector.seen
        wanted = {r for item in items for r in item.requests}
        todo = [r for r in wanted if r not in self._cache]
        if len(self._cache) + len(todo) > CACHE_LIMIT:
            self._cache.clear()
            todo = list(wanted)
        for at in range(0, len(todo), BATCH_TEXTS):
            batch = todo[at : at + BATCH_TEXTS]
            for request, hits in zip(batch, self.analyzer.analyze_many(batch), strict=True):
                self._cache[request] = hits

        by_scope: dict[str, list[Item]] = defaultdict(list)
        for item in items:
            by_scope[item.scope].append(item)
        replacements = 0
        for scope, scoped in by_scope.items():
            subs = TraceSubstitutions(scope, self.mode, self.policy, self.keys)
            known = self._known_values(scoped)
            for item in scoped:
                item.result = item.walk(Apply(item, subs, self._cache, known, self.operator_lines))
                replacements += item.tally.replacements
        ner = {key: value - ner_before.get(key, 0) for key, value in self.analyzer.ner_stats().items()}
        return {
            "fields_seen": seen,
            "distinct_texts": len(wanted),
            "analyzed": len(todo),
            "replacements": replacements,
            **ner,
        }

    def _known_values(self, items: Sequence[Item]) -> list[tuple[str, str]]:
        """(value, entity) detected anywhere in these items, longest first."""
        known: dict[str, str] = {}
        for item in items:
            for request in item.requests:
                if request.restricted:
                    continue
                for hit in self._cache.get(request, ()):
                    if hit.entity == PERSON and in_operator_line(request.text, hit.start, hit.end, self.operator_lines):
                        continue
                    known.setdefault(request.text[hit.start : hit.end], hit.entity)
            for value, entity in item.sensitive:
                known.setdefault(value, entity)
        return sorted(
            ((v, e) for v, e in known.items() if len(v.strip()) >= MIN_PROPAGATED_CHARS),
            key=lambda pair: (-len(pair[0]), pair[0]),
        )
