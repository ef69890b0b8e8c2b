"""The redactor: canonical rows or raw documents in, redacted ones out.

Three passes over a batch:

1. collect: walk every text-bearing field and gather what the analyzer must
   see, deduplicated by (text, how to look at it): a system prompt or a
   retrieved document repeated across thousands of calls is analyzed once,
   and so is the same message in ``request_json`` and in ``messages``;
2. analyze the texts not seen before in this redactor (in worker processes
   for a large batch);
3. apply, trace by trace: each detected value, and every other mention of a
   value detected anywhere in the trace, is replaced by the trace's
   substitution for it.

For `calls` rows the request hash and the keyed block hashes are computed
from the raw request before anything is replaced.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from pipelines.collector import gc_paused
from pipelines.record import canonical
from pipelines.record.rows import BOOKKEEPING
from pipelines.redact import nlp
from pipelines.redact.analyzer import DetectorSettings, Hit, Request, detector_versions
from pipelines.redact.audit import AuditContext, audit_row
from pipelines.redact.block_hashes import raw_block_hashes
from pipelines.redact.field_rules import FieldRules
from pipelines.redact.identifiers import ID_COLUMNS, LABEL_COLUMNS, pseudonymize_row
from pipelines.redact.keys import KeyRing
from pipelines.redact.passes import Apply, Collect, Item, JsonContent, JsonKey
from pipelines.redact.policy import Policy, load_policy
from pipelines.redact.pool import AnalyzerPool, WorkerConfig
from pipelines.redact.residual import IDENTIFIER_COLUMNS, RowScreen, TextScreen, merge_residuals
from pipelines.redact.row_fields import walk_row
from pipelines.redact.substitution import TraceSubstitutions, check_mode
from pipelines.redact.template_text import literal_parts
from pipelines.redact.walker import JsonWalker

REDACTED_FLAG = "redacted"
HASH_MISMATCH_FLAG = "request_hash_mismatch"
# The columns besides the text columns that redaction may write (hashes and flags redone,
# ids and labels pseudonymized, the record hash): every other one is stored as it came.
REWRITTEN_COLUMNS = frozenset(
    {"block_hashes", "request_sha256", "request_hash_matches", "flags", "record_sha256", *ID_COLUMNS, *LABEL_COLUMNS}
)
# the key of ``redact_columns``' screen results that holds its own ``settled`` cells (table -> column -> rows)
SETTLED = "settled"
# shorter values are not looked for elsewhere in the trace ("Ana" inside "Banana")
MIN_PROPAGATED_CHARS = 4
CACHE_LIMIT = 500_000

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
    # with ``redact_rows(screen=patterns)``: the residual-PII classes still found in
    # each returned row, per table ("calls", "spans"), and the patterns they were found with
    residuals: dict[str, list[tuple[str, ...]]] | None = None
    screened: tuple[str, ...] = ()


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


class Redactor:
    """Redacts rows and documents under one policy and mode.

    ``workers`` > 1 spreads analysis over that many processes for large
    batches. Analysis results are cached for the redactor's life, so keep one
    redactor per run. Use it as a context manager, or call ``close()``, to
    stop the workers.

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
        self._template_walkers: dict[TemplateKey, JsonWalker] = {}
        self.pool = AnalyzerPool(self.settings, workers, WorkerConfig(self.policy, self.mode, self.keys, self.ner))
        self._cache: dict[Request, list[Hit]] = {}
        # set in a worker process while it redacts a chunk: learns the names of NER's lines from the caller
        self.line_exchange: Callable[[Sequence[Request]], None] | None = None

    def __enter__(self) -> Redactor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.pool.close()

    def versions(self) -> dict[str, str]:
        return detector_versions(self.ner)

    # -- rows -----------------------------------------------------------------

    def redact_rows(
        self,
        calls: Sequence[dict[str, Any]],
        spans: Sequence[dict[str, Any]] = (),
        *,
        now: datetime | None = None,
        screen: Sequence[str] | None = None,
        settled: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> RedactionResult:
        """Redacted copies of ``calls`` and ``spans`` (same columns, same
        types, same order), and one audit row per call and per span outside any call.

        ``screen``: also run the residual-PII scan (``residual.row_residuals``
        with these patterns) over the returned rows, where they are made: the
        text columns in the worker that redacted them, the other columns here
        as each worker's rows come back (``RedactionResult.residuals``).
        ``settled``: table -> ``residual.settled_cells`` of these rows as given: the
        screen does not judge those values again, but in ``REWRITTEN_COLUMNS``."""
        now = now or datetime.now(UTC)
        self.look_up_templates(calls)
        patterns = tuple(screen) if screen is not None else None
        kept = {
            table: {column: np.asarray(cells, dtype=bool) for column, cells in columns.items()}
            for table, columns in (settled or {}).items()
        }
        for columns in kept.values():
            for column in REWRITTEN_COLUMNS.intersection(columns):
                del columns[column]
        if self.pool.parallel_rows(len(calls) + len(spans)):
            return self._redact_in_workers(calls, spans, now, patterns, kept)
        call_updates, span_updates, audit, stats, text_found = self.redact_columns(calls, spans, now, patterns)
        out_calls = self._finished(calls, call_updates)
        out_spans = self._finished(spans, span_updates)
        result = RedactionResult(out_calls, out_spans, audit, stats)
        if patterns is not None and text_found is not None:
            started = time.process_time()
            ids = RowScreen(self.policy, patterns)
            result.residuals = {
                table: merge_residuals(
                    text_found[table],
                    ids.residuals(
                        rows,
                        table,
                        part=IDENTIFIER_COLUMNS,
                        settled={**kept.get(table, {}), **text_found.get(SETTLED, {}).get(table, {})},
                    ),
                    patterns,
                )
                for table, rows in (("calls", out_calls), ("spans", out_spans))
            }
            result.screened = patterns
            stats["screen_cpu_ms"] += round((time.process_time() - started) * 1000)
        return result

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
        self,
        calls: Sequence[dict[str, Any]],
        spans: Sequence[dict[str, Any]],
        now: datetime,
        screen: Sequence[str] | None = None,
    ) -> tuple[list[dict], list[dict], list[dict], dict[str, int], dict[str, list[tuple[str, ...]]] | None]:
        """For each row, the columns redaction changes (only those), the audit
        rows and the stats. Rows need only the text-bearing and hash columns
        (``pool.CALL_COLUMNS``, ``pool.SPAN_COLUMNS``): workers get no more than that.
        With ``screen`` patterns, also the residual-PII classes of each row's text
        columns as redacted (``row_residuals(..., part=TEXT_COLUMNS)``), found in
        the apply pass as it writes each value, and under ``SETTLED`` the judgement of
        the calls' block hashes as stored (``RowScreen.settled_column``); else None."""
        with gc_paused():
            return self._redact_columns(calls, spans, now, screen)

    def _redact_columns(
        self,
        calls: Sequence[dict[str, Any]],
        spans: Sequence[dict[str, Any]],
        now: datetime,
        screen: Sequence[str] | None,
        here: bool = False,
    ) -> tuple[list[dict], list[dict], list[dict], dict[str, int], dict[str, list[tuple[str, ...]]] | None]:
        prepared = [self._prepare_call(call) for call in calls]
        public = self.policy.is_public_document if self.policy.public_documents else None
        call_items = [
            Item(
                call.get("trace_id") or "",
                lambda v, r=call: walk_row(
                    r, "calls", self._walker_for(r), v, public, inspect=getattr(v, "inspect", None)
                ),
            )
            for call in calls
        ]
        span_items = [
            Item(
                span.get("trace_id") or "",
                lambda v, r=span: walk_row(r, "spans", self.walker, v, inspect=getattr(v, "inspect", None)),
            )
            for span in spans
        ]
        # placeholders are numbered in the order a trace happened, whatever the input order
        rows = [*calls, *spans]
        items = call_items + span_items
        order = sorted(range(len(rows)), key=lambda i: (_sort_key(rows[i]), i))
        stats = self._redact_items([items[i] for i in order], screen=screen is not None, here=here)
        found = None
        if screen is not None:
            started = time.process_time()
            text_screen = TextScreen(self.policy, screen)
            found = {
                "calls": text_screen.rows(item.written for item in call_items),
                "spans": text_screen.rows(item.written for item in span_items),
            }
            stats["screen_cpu_ms"] = round((time.process_time() - started) * 1000)

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
        if found is not None and not here:
            # the block hashes as stored (a day's 680k dicts) are judged where they are made:
            # in a worker, beside the caller, which takes the judgement (``RowScreen.settled_column``)
            started = time.process_time()
            stored = zip(calls, call_updates, strict=True)
            hashes = [update.get("block_hashes", call.get("block_hashes")) for call, update in stored]
            found[SETTLED] = {"calls": {"block_hashes": RowScreen(self.policy, screen).settled_column(hashes)}}
            stats["screen_cpu_ms"] += round((time.process_time() - started) * 1000)
        return call_updates, span_updates, audit, stats, found

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

    @gc_paused()
    def _redact_in_workers(
        self,
        calls: Sequence[dict[str, Any]],
        spans: Sequence[dict[str, Any]],
        now: datetime,
        screen: tuple[str, ...] | None,
        settled: Mapping[str, Mapping[str, Any]],
    ) -> RedactionResult:
        """The same result as in one process: each trace is redacted whole, in one
        chunk, here or in a worker. A worker's rows are finished here (and their
        identifier columns screened) between this process's own chunks. No cyclic GC meanwhile:
        unpickling a shard's results and finishing its rows make millions of
        objects, and collections over the day's rows cost more than the work."""
        out_calls: list[Any] = [None] * len(calls)
        out_spans: list[Any] = [None] * len(spans)
        found: dict[str, list[Any]] = {"calls": [None] * len(calls), "spans": [None] * len(spans)}
        audit: list[dict[str, Any]] = []
        stats: dict[str, int] = defaultdict(int)

        def here(shard_calls: list[dict], shard_spans: list[dict]) -> tuple:
            return self._redact_columns(shard_calls, shard_spans, now, screen, here=True)

        # one identifier screen for every shard: a model, a service, a session id is judged once
        id_screen = RowScreen(self.policy, screen or ())

        for call_at, span_at, shard in self.pool.redact_shards(calls, spans, now, screen, here, self.template_text):
            c_updates, s_updates, s_audit, s_stats, text_found = shard
            for table, rows, at, updates, out in (
                ("calls", calls, call_at, c_updates, out_calls),
                ("spans", spans, span_at, s_updates, out_spans),
            ):
                finished = self._finished([rows[i] for i in at], updates)
                for i, row in zip(at, finished, strict=True):
                    out[i] = row
                if screen is not None:
                    started = time.process_time()
                    shard_settled = {column: cells[at] for column, cells in settled.get(table, {}).items()}
                    shard_settled.update(text_found.get(SETTLED, {}).get(table, {}))  # judged in the worker
                    ids = id_screen.residuals(finished, table, part=IDENTIFIER_COLUMNS, settled=shard_settled)
                    for i, classes in zip(at, merge_residuals(text_found[table], ids, screen), strict=True):
                        found[table][i] = classes
                    stats["screen_cpu_ms"] += round((time.process_time() - started) * 1000)
            audit += s_audit
            for key, value in s_stats.items():
                stats[key] += value
        # audit rows in input order: calls first, then spans, as in one process
        # (an llm_call span's span_key equals its call's call_id: look up per table)
        position = {
            "calls": {row["call_id"]: i for i, row in enumerate(calls)},
            "spans": {row["span_key"]: len(calls) + i for i, row in enumerate(spans)},
        }
        audit.sort(key=lambda row: position[row["source_table"]][row["span_key"]])
        result = RedactionResult(out_calls, out_spans, audit, dict(stats))
        if screen is not None:
            result.residuals, result.screened = found, screen
        return result

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
        items = [Item(trace_scope(doc), lambda v, d=doc: self.walker.walk(d, "", v)) for doc in documents]
        with gc_paused():
            self._redact_items(items)
        return [item.result for item in items]

    # -- the three passes -----------------------------------------------------

    def _redact_items(self, items: Sequence[Item], screen: bool = False, here: bool = False) -> dict[str, int]:
        """``screen``: each item keeps its text column values as written (``Item.written``);
        ``here``: analyzed in this process (a chunk of ``pool.redact_shards`` is)."""
        ner_before = self.pool.ner_stats()
        seen = 0
        contents: dict[JsonKey, JsonContent] = {}
        for item in items:
            collector = Collect(item, contents)
            item.walk(collector)
            seen += collector.seen
        wanted = {r for item in items for r in item.requests}
        todo = [r for r in wanted if r not in self._cache]
        if len(self._cache) + len(todo) > CACHE_LIMIT:
            self._cache.clear()
            todo = list(wanted)
        if self.line_exchange is not None:
            self.line_exchange(todo)
        for request, hits in zip(todo, self.pool.analyze(todo, here=here), strict=True):
            self._cache[request] = hits

        by_scope: dict[str, list[Item]] = defaultdict(list)
        for item in items:
            by_scope[item.scope].append(item)
        replacements = 0
        for scope, scoped in by_scope.items():
            subs = TraceSubstitutions(scope, self.mode, self.policy, self.keys)
            known = self._known_values(scoped)
            done: dict[JsonKey, tuple[str, list]] = {}
            for item in scoped:
                item.result = item.walk(Apply(item, subs, self._cache, known, contents, done, screen))
                replacements += item.tally.replacements
        ner = {key: value - ner_before.get(key, 0) for key, value in self.pool.ner_stats().items()}
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
                    known.setdefault(request.text[hit.start : hit.end], hit.entity)
            for value, entity in item.sensitive:
                known.setdefault(value, entity)
        return sorted(
            ((v, e) for v, e in known.items() if len(v.strip()) >= MIN_PROPAGATED_CHARS),
            key=lambda pair: (-len(pair[0]), pair[0]),
        )
