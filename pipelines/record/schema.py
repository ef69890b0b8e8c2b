"""Every tracelake table, declared once: what a row is, its key, how it is partitioned,
what it references, and per column its Arrow type, meaning and an example.

The table written is the table read. Every key is stored in full, every row is stored,
and every column means what its meaning below says, with no reader's help. The Delta
tables carry this module's words: each table its name and description in the Delta
metadata, each column its meaning as the column's ``comment`` (``Warehouse`` writes
them). ``docs/tables.md`` and the README's table list are generated from here
(``pipelines.record.dictionary``; ``tests/ingest/test_table_docs.py`` fails when they drift).

Timestamps are ``timestamp("us", "UTC")`` (delta-rs writes naive timestamps as
``timestampNtz``, which older Spark and Trino refuse). Arbitrary JSON is stored as JSON
text, because Arrow has no "any" type. Text a user or a model wrote is ``large_string``,
so that polars round-trips it without a cast.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

SCHEMA_VERSION = "1"
# The layout of the stored tables. 2: keys in full, every row stored, statistics on every
# column, self-describing (``pipelines/migrate.py`` rewrites a layout-1 warehouse). Written
# into the first key column's Delta metadata in the same commit as the rows.
LAYOUT = 2
LAYOUT_KEY = "tracelake.layout"

TS = pa.timestamp("us", tz="UTC")
JSON = pa.large_string()
TEXT = pa.large_string()
STR = pa.string()
ID = pa.string()
DATE = pa.date32()
INT = pa.int64()
FLOAT = pa.float64()
BOOL = pa.bool_()
SEGMENT = pa.map_(pa.string(), pa.string())

# A content part of a message: text, tool_call, tool_result, thinking, image, or
# anything else (kept verbatim in native_json so nothing a source sent is lost).
PART = pa.struct(
    [
        ("type", STR),
        ("text", TEXT),
        ("tool_call_id", STR),
        ("tool_name", STR),
        ("arguments_json", JSON),
        ("content_json", JSON),
        ("is_error", BOOL),
        ("native_json", JSON),
    ]
)
MESSAGE = pa.struct([("role", STR), ("name", STR), ("parts", pa.list_(PART))])
TOOL_DEFINITION = pa.struct([("name", STR), ("description", TEXT), ("schema_json", JSON), ("native_json", JSON)])
PARAMS = pa.struct(
    [
        ("max_tokens", INT),
        ("temperature", FLOAT),
        ("top_p", FLOAT),
        ("top_k", INT),
        ("seed", INT),
        ("stop_sequences", pa.list_(STR)),
    ]
)
DOCUMENT = pa.struct(
    [("doc_id", STR), ("rank", pa.int32()), ("score", FLOAT), ("text", TEXT), ("text_sha256", STR), ("tokens", INT)]
)
RETRIEVAL = pa.struct(
    [("embedding_model", STR), ("index_snapshot", STR), ("query_text", TEXT), ("documents", pa.list_(DOCUMENT))]
)
TOOL_EXECUTION = pa.struct(
    [
        ("span_id", STR),
        ("tool_call_id", STR),
        ("name", STR),
        ("arguments_json", JSON),
        ("result_json", JSON),
        ("is_error", BOOL),
        ("started_at", TS),
        ("ended_at", TS),
    ]
)
USAGE = pa.struct(
    [
        ("input_tokens", INT),
        ("output_tokens", INT),
        ("cache_read_input_tokens", INT),
        ("cache_write_input_tokens", INT),
        ("total_tokens", INT),
        ("cost_usd", FLOAT),
    ]
)
FEEDBACK = pa.struct(
    [
        ("source", STR),
        ("name", STR),
        ("value_number", FLOAT),
        ("value_string", STR),
        ("comment", TEXT),
        ("created_at", TS),
        # the item's identity: the source's id, else derived before redaction from the call, source,
        # name and time (formats/assembly.py with_feedback_ids): merging it again is a no-op
        ("id", STR),
        # call, trace or session: what the source attached it to
        ("target_level", STR),
    ]
)
# One hash per request block ("system", "messages[3]", "tools", "params", "model",
# "document:<doc_id>"); see record/canonical.py. algorithm: "sha256", or "hmac-sha256" for
# blocks that may hold PII, keyed at redaction (pipelines/redact/block_hashes.py).
BLOCK_HASH = pa.struct([("block", STR), ("sha256", STR), ("tokens", INT), ("algorithm", STR)])

CAPTURE_ITEMS = (
    "input",
    "prompt_version",
    "model_params",
    "tool_results",
    "intermediate_observations",
    "output_finish_reason",
    "seed",
    "timestamp_response_id",
)

# examples used by many columns
CALL = "7d1f0c4e9b2a…  (64 hex digits)"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
DAY = "2026-11-29"
WHEN = "2026-11-29 14:32:05.120 UTC"
DIGEST = "e3b0c44298fc1c14…  (64 hex digits)"


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    meaning: str
    example: str = ""


def c(name: str, type_: pa.DataType, meaning: str, example: str = "") -> Column:
    return Column(name, type_, meaning, example)


@dataclass(frozen=True)
class Table:
    name: str
    # "one row per ...": what a row is
    row: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    partitioned_by: tuple[str, ...] = ()
    # column -> the table whose (one-column) key it holds
    references: dict[str, str] = field(default_factory=dict)

    @property
    def description(self) -> str:
        """The Delta table description: what a row is and its key."""
        return f"{self.row}. Key: {', '.join(self.key)}."

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema, each column's meaning as its ``comment``; the first key column
        also says the table's ``LAYOUT`` (``LAYOUT_KEY``)."""
        fields = []
        for col in self.columns:
            metadata = {"comment": col.meaning}
            if col.name == self.key[0]:
                metadata[LAYOUT_KEY] = str(LAYOUT)
            fields.append(pa.field(col.name, col.type, metadata=metadata))
        return pa.schema(fields)

    def column(self, name: str) -> Column:
        return next(col for col in self.columns if col.name == name)


def _source(row: str) -> tuple[Column, ...]:
    """Where a row of ``calls`` or ``spans`` came from."""
    return (
        c("source_format", STR, f"the format the {row} was read from (see the README's source formats)", "otlp_json"),
        c("source_uri", STR, "the raw object it was read from", "s3://acme-llm-logs/prod/2026/11/29/14-000.jsonl.gz"),
        c("source_etag", STR, "the raw object's etag when it was read", '"9b2cf535f27731c974343645a3985328"'),
        c("source_line", INT, "1-based line (or record number) in the raw object", "1207"),
        c("ingested_at", TS, "when tracelake ingested it", WHEN),
    )


def _record_sha256(what: str = "the row") -> Column:
    return c(
        "record_sha256",
        STR,
        f"sha256 of {what}'s content (without bookkeeping columns): a write rewrites a stored row only when it changes",
        DIGEST,
    )


# The declarations read as tables: one column a line (ruff's formatter leaves them so).
# fmt: off
CALLS_TABLE = Table(
    "calls",
    "One row per model call: the frozen request and response, the replay unit",
    key=("call_id",),
    partitioned_by=("occurred_date", "occurred_hour"),
    references={"trace_id": "traces"},
    columns=(
        c("call_id", ID, "sha256 hex of 'source_format|trace_id|span_id': stable across re-ingestion", CALL),
        c("trace_id", ID, "the trace (or agent session) the call belongs to", TRACE),
        c("span_id", ID, "the call's span id in its source (defaults to the provider's response id)", "00f067aa0ba902b7"),
        c("parent_span_id", ID, "the span the call was made under, if any", "b9c7c989f97918e1"),
        c("session_id", STR, "the application's session or conversation thread", "sess-8812"),
        c("conversation_id", STR, "the conversation id where the source has one apart from the session", "conv-41"),
        c("user_id", STR, "the end user; an email, phone or tax id used as an id is stored as pii-<keyed hash>", "u-1042"),
        *_source("call"),
        c("schema_version", STR, "version of the canonical call record", SCHEMA_VERSION),
        _record_sha256("the call"),
        c("occurred_at", TS, "when the request was sent", WHEN),
        c("ended_at", TS, "when the response finished", WHEN),
        c("first_token_at", TS, "when the first streamed token arrived", WHEN),
        c("occurred_date", DATE, "UTC date of occurred_at (partition column)", DAY),
        c("occurred_hour", pa.int32(), "UTC hour of occurred_at, 0-23 (partition column)", "14"),
        c("latency_ms", FLOAT, "milliseconds from request to the end of the response", "1840.5"),
        c("service", STR, "the application route or service that made the call", "support.answer"),
        c("environment", STR, "deployment environment", "prod"),
        c("release", STR, "application release or commit that made the call", "2026.11.3"),
        c("tags", pa.list_(STR), "the source's free-form tags", "[beta, eu]"),
        c("segment", SEGMENT, "segment fields used by retention and replay summaries", "{user_tier: pro, language: pt-BR}"),
        c("template_id", STR, "the prompt template the request was rendered from", "support/answer"),
        c("template_version", STR, "the template version it was rendered from", "v3"),
        c("template_label", STR, "the template label it was resolved through (production, ...)", "production"),
        c("template_variables_json", JSON, "the variables the template was rendered with, as JSON (redacted)", '{"customer": "<PERSON_1>"}'),
        c("provider", STR, "the model provider", "anthropic"),
        c("request_model", STR, "the model id as sent", "claude-sonnet-4-5-20250929"),
        c("model_alias", STR, "the application-level alias request_model was resolved from, if any", "answer-model"),
        c("response_model", STR, "the model snapshot the provider says answered", "claude-sonnet-4-5-20250929"),
        c("endpoint", STR, "the API endpoint the request went to", "messages"),
        c("params", PARAMS, "sampling parameters as sent (max_tokens, temperature, top_p, top_k, seed, stop_sequences)", "{max_tokens: 1024, temperature: 0.3}"),
        c("params_extra_json", JSON, "the other request parameters as JSON (thinking, tool_choice, output format)", '{"tool_choice": {"type": "auto"}}'),
        c("system_text", TEXT, "the system prompt as sent (redacted)", "You are the support assistant of …"),
        c("messages", pa.list_(MESSAGE), "the request's messages: role, name and parts (text, tool calls, tool results)", ""),
        c("tool_definitions", pa.list_(TOOL_DEFINITION), "the tools offered: name, description, JSON schema", ""),
        c("request_json", JSON, "the canonical request body (the hashing spec's bytes), redacted", '{"max_tokens":1024,"messages":[…]}'),
        c("retrieval", RETRIEVAL, "retrieval around the call: embedding model, index snapshot, query, documents", ""),
        c("tool_executions", pa.list_(TOOL_EXECUTION), "tool calls executed for this call, with arguments and results", ""),
        c("output_text", TEXT, "the response's text (redacted)", "Seu pedido foi enviado …"),
        c("output_messages", pa.list_(MESSAGE), "the response as messages (text, tool calls)", ""),
        c("finish_reason", STR, "normalized finish reason: stop, length, tool_use, content_filter, error, ...", "stop"),
        c("stop_reason_native", STR, "the provider's own stop reason", "end_turn"),
        c("response_id", STR, "the provider's response id", "msg_01XFDUDYJgAACzvnptvVoYEL"),
        c("provider_request_id", STR, "the provider's request id", "req_011CQ…"),
        c("previous_response_id", STR, "the response this one continued server-side, if any", "resp_67cb…"),
        c("usage", USAGE, "tokens (input, output, cache read and write, total) and cost in USD", "{input_tokens: 1830, output_tokens: 212, cost_usd: 0.0087}"),
        c("status", STR, "ok or error", "ok"),
        c("error_type", STR, "the error class when status is error", "overloaded_error"),
        c("error_message", TEXT, "the error's message (redacted)", "Overloaded"),
        c("feedback", pa.list_(FEEDBACK), "user and evaluator feedback joined onto the call (scores, thumbs, comments)", ""),
        c("eval_score", FLOAT, "an evaluation score the source recorded", "0.82"),
        c("escalated", BOOL, "the conversation was escalated to a human", "false"),
        c("guardrail_hit", BOOL, "a guardrail fired on the call", "false"),
        c("flags", pa.list_(STR), "flags from the source and from ingest (redacted, ...)", "[redacted]"),
        c("rendered_request_sha256", STR, "the request hash the application recorded at capture time (the witness)", DIGEST),
        c("rendered_request_uri", STR, "where the application kept the rendered request bytes, if anywhere", "s3://acme-renders/2026/11/29/7d1f.json"),
        c("request_sha256", STR, "sha256 of request_json as stored (null: no request body)", DIGEST),
        c("request_hash_matches", BOOL, "rendered_request_sha256 equals the hash of the request as received, before redaction", "true"),
        c("block_hashes", pa.list_(BLOCK_HASH), "a hash per request block (system, messages[i], tools, params, model, document:<id>); keyed HMAC where a block may hold PII", ""),
        c("rot_set_key", STR, "the rot check's ingredient-set key (template, variables, route, alias, documents, block hashes); null: the call cannot share a verdict (redacted, incomplete)", "9f2c41aa07d3e615"),
        c("context_complete", BOOL, "the request holds its whole context (no server-side state, content captured, not truncated)", "true"),
        c("content_captured", BOOL, "the source recorded message content", "true"),
        c("truncated", BOOL, "the source truncated the recorded content", "false"),
        c("capture_missing", pa.list_(STR), "items of the capture list the record lacks: " + ", ".join(CAPTURE_ITEMS), "[seed]"),
        c("extra_json", JSON, "anything the source sent that has no column above, as JSON", '{"app.ab_bucket": "b"}'),
        c("instrumentation_scope", STR, "the library that recorded the call (name/version), where the source says", "opentelemetry.instrumentation.anthropic/0.40.2"),
    ),
)

SPANS_TABLE = Table(
    "spans",
    "One row per span or event of a trace: llm calls, tools, retrievals, thoughts, state changes, session start and end",
    key=("span_key",),
    partitioned_by=("occurred_date", "occurred_hour"),
    references={"call_id": "calls", "trace_id": "traces"},
    columns=(
        c("span_key", ID, "sha256 hex of 'source_format|trace_id|span_id' (an llm_call span's equals its call_id)", CALL),
        c("trace_id", ID, "the trace (or agent session) the span belongs to", TRACE),
        c("span_id", ID, "the span's id in its source", "00f067aa0ba902b7"),
        c("parent_span_id", ID, "the parent span's id in its source", "b9c7c989f97918e1"),
        c("session_id", STR, "the application's session", "sess-8812"),
        c("user_id", STR, "the end user (pseudonymized where it is personal data, as in calls)", "u-1042"),
        c("call_id", ID, "the model call this span is (llm_call spans; null for other kinds)", CALL),
        *_source("span"),
        _record_sha256("the span"),
        c("kind", STR, "llm_call, tool, retrieval, think, state, session_start, session_end, check or other", "tool"),
        c("name", STR, "the span's name in its source", "chat claude-sonnet-4-5-20250929"),
        c("step_index", INT, "the step's number in its agent session (0-based), where the source numbers steps", "3"),
        c("occurred_at", TS, "when the span started", WHEN),
        c("ended_at", TS, "when the span ended", WHEN),
        c("occurred_date", DATE, "UTC date of occurred_at (partition column)", DAY),
        c("occurred_hour", pa.int32(), "UTC hour of occurred_at, 0-23 (partition column)", "14"),
        c("duration_ms", FLOAT, "milliseconds from start to end", "212.0"),
        c("status", STR, "ok or error", "ok"),
        c("tool_name", STR, "the tool a tool span ran", "lookup_order"),
        c("input_tokens", INT, "input tokens of an llm_call span", "1830"),
        c("output_tokens", INT, "output tokens of an llm_call span", "212"),
        c("cost_usd", FLOAT, "cost in USD of an llm_call span", "0.0087"),
        c("attributes_json", JSON, "the span's other attributes, as JSON (redacted)", '{"tool.result_count": 3}'),
    ),
)

TRACES_TABLE = Table(
    "traces",
    "One row per trace or agent session: totals, outcome, feedback, segment",
    key=("trace_id",),
    partitioned_by=("occurred_date",),
    columns=(
        c("trace_id", ID, "the trace (or agent session)", TRACE),
        c("session_id", STR, "the application's session", "sess-8812"),
        c("user_id", STR, "the end user (pseudonymized where it is personal data)", "u-1042"),
        c("source_format", STR, "the format its spans were read from", "agent_events"),
        c("service", STR, "the route of its first call", "support.answer"),
        c("environment", STR, "deployment environment", "prod"),
        c("segment", SEGMENT, "segment fields of its first call", "{user_tier: pro, language: en}"),
        c("started_at", TS, "its first span's start", WHEN),
        c("ended_at", TS, "its last span's end", WHEN),
        c("occurred_date", DATE, "UTC date of started_at (partition column)", DAY),
        c("duration_ms", FLOAT, "milliseconds from start to end", "8123.0"),
        c("call_count", INT, "model calls in the trace", "3"),
        c("span_count", INT, "spans in the trace", "11"),
        c("step_count", INT, "agent steps in the trace", "9"),
        c("tool_call_count", INT, "tool calls in the trace", "4"),
        c("input_tokens", INT, "input tokens over its calls", "5210"),
        c("output_tokens", INT, "output tokens over its calls", "640"),
        c("total_tokens", INT, "input plus output tokens", "5850"),
        c("cost_usd", FLOAT, "cost in USD over its calls", "0.0241"),
        c("models", pa.list_(STR), "the models its calls used", "[claude-sonnet-4-5-20250929]"),
        c("error_count", INT, "spans with status error", "0"),
        c("outcome", STR, "the session's own verdict where a source gives one (session.end), else derived: success, error, abandoned, ...", "success"),
        c("negative_feedback", BOOL, "any call of the trace got negative feedback", "false"),
        c("escalated", BOOL, "the trace was escalated to a human", "false"),
        _record_sha256(),
        c("rolled_up_at", TS, "when the rollup was computed", WHEN),
    ),
)

INGEST_LOG_TABLE = Table(
    "ingest_log",
    "One row per source object version processed, with record accounting (records_read = records_ingested + records_quarantined)",
    key=("source_key", "etag"),
    partitioned_by=("partition_date",),
    columns=(
        c("source_key", STR, "the object's key under the source", "2026/11/29/support/14-000.jsonl.gz"),
        c("etag", STR, "the object version's etag", '"9b2cf535f27731c974343645a3985328"'),
        c("source_uri", STR, "the object's full URI", "s3://acme-llm-logs/prod/2026/11/29/support/14-000.jsonl.gz"),
        c("size_bytes", INT, "the object's size", "183211"),
        c("last_modified", TS, "the object's last-modified time", WHEN),
        c("partition_date", DATE, "the day the object was ingested for (partition column)", DAY),
        c("source_format", STR, "the format it was read as", "frozen_call"),
        c("records_read", INT, "records in the object", "500"),
        c("records_ingested", INT, "records that became rows", "499"),
        c("records_quarantined", INT, "records that went to quarantine", "1"),
        c("calls", INT, "calls rows it produced", "420"),
        c("spans", INT, "spans rows it produced", "910"),
        c("status", STR, "ok: every record ingested; partial: some quarantined; failed: object unreadable", "partial"),
        c("run_id", STR, "the Dagster run that ingested it", "cb0590da-b46c-48c6-a86d-80b2845b32b4"),
        c("ingested_at", TS, "when it was ingested", WHEN),
        _record_sha256(),
    ),
)

QUARANTINE_TABLE = Table(
    "quarantine",
    "One row per record or object that could not be ingested: where and why (never its content)",
    key=("quarantine_id",),
    partitioned_by=("ingested_date",),
    columns=(
        c("quarantine_id", ID, "sha256 of object, etag, line and reason", DIGEST),
        c("source_key", STR, "the object's key under the source", "2026/11/29/support/14-000.jsonl.gz"),
        c("source_uri", STR, "the object's full URI", "s3://acme-llm-logs/prod/2026/11/29/support/14-000.jsonl.gz"),
        c("etag", STR, "the object version's etag", '"9b2cf535f27731c974343645a3985328"'),
        c("line", INT, "1-based line for line-oriented objects; null when the whole object failed", "88"),
        c("byte_offset", INT, "byte offset of the record in the object", "40211"),
        c("scope", STR, "object: the object as a whole could not be read; record: one record in it", "record"),
        c("source_format", STR, "the format it was read as", "agent_events"),
        c("error_class", STR, "what went wrong: invalid_json, missing_field, bad_type, residual_pii, ...", "missing_field"),
        c("message", STR, "what was expected; never quotes the record", "call has no trace_id"),
        c("run_id", STR, "the Dagster run that found it", "cb0590da-b46c-48c6-a86d-80b2845b32b4"),
        c("ingested_at", TS, "when it was found", WHEN),
        c("ingested_date", DATE, "UTC date of ingested_at (partition column)", DAY),
    ),
)

# The segment columns are copied from the call so that coverage and reweighting need no
# join; an absent value is "unknown", never null.
RETENTION_TABLE = Table(
    "retention",
    "One row per call: its retention tier, every reason, and the probability it is kept in full",
    key=("call_id",),
    partitioned_by=("occurred_date",),
    references={"call_id": "calls", "trace_id": "traces"},
    columns=(
        c("call_id", ID, "the call decided", CALL),
        c("trace_id", ID, "the call's trace", TRACE),
        c("occurred_date", DATE, "the call's day (partition column)", DAY),
        c("service", STR, "the call's route", "support.answer"),
        c("user_tier", STR, "the call's user tier (unknown when absent)", "pro"),
        c("language", STR, "the call's language (unknown when absent)", "pt-BR"),
        c("input_bucket", STR, "the call's input-length bucket", "long"),
        c("tier", STR, "full: every byte kept past the hot window; ingredients: text swept, ingredients and hashes kept", "ingredients"),
        c("reasons", pa.list_(STR), "every rule that matched: own rules, trace:<rule> when another call of the trace matched, or sampled", "[negative_feedback]"),
        c("keep_probability", FLOAT, "probability that this call is kept in full: 1.0 when a rule keeps it, else its trace's sampling rate", "0.1"),
        c("sampling_rate", FLOAT, "the sampling rate of the call's stratum", "0.1"),
        c("policy_version", STR, "the retention policy's version", "3"),
        c("policy_sha256", STR, "sha256 of the retention policy file", DIGEST),
        c("decided_at", TS, "when the decision was made", WHEN),
        c("swept_at", TS, "when the sweep last made sure this call holds no full text (null: not swept)", WHEN),
        _record_sha256(),
    ),
)

RETENTION_COVERAGE_TABLE = Table(
    "retention_coverage",
    "One row per segment (service x user tier x language x input length) and window of days: calls seen and kept",
    key=("window_end", "segment_key"),
    partitioned_by=("window_end",),
    columns=(
        c("window_end", DATE, "last day of the window (partition column)", DAY),
        c("window_start", DATE, "first day of the window", "2026-11-23"),
        c("segment_key", STR, "service|user_tier|language|input_bucket", "support.answer|pro|pt-BR|long"),
        c("service", STR, "the segment's route", "support.answer"),
        c("user_tier", STR, "the segment's user tier", "pro"),
        c("language", STR, "the segment's language", "pt-BR"),
        c("input_bucket", STR, "the segment's input-length bucket", "long"),
        c("calls_seen", INT, "calls of the segment in the window", "812"),
        c("kept_full", INT, "of which kept in full", "97"),
        c("kept_by_rule", INT, "kept in full by a rule", "21"),
        c("kept_by_sampling", INT, "kept in full by sampling", "76"),
        c("mean_sampling_rate", FLOAT, "mean sampling rate over the segment's calls", "0.1"),
        c("expected_full", FLOAT, "rule-kept calls plus the sampling rate summed over the rest: what kept_full should be near", "100.1"),
        c("estimated_calls", FLOAT, "Horvitz-Thompson estimate of calls_seen from the full-kept calls alone (sum of 1/keep_probability)", "781.0"),
        c("uncovered", BOOL, "no call of the segment kept in full in the window", "false"),
        c("policy_version", STR, "the retention policy's version", "3"),
        c("computed_at", TS, "when it was computed", WHEN),
        _record_sha256(),
    ),
)

ERASURE_LOG_TABLE = Table(
    "erasure_log",
    "One row per `tracelake forget`: when, who asked, rows deleted per table (no personal data)",
    key=("erasure_id",),
    columns=(
        c("erasure_id", ID, "sha256 of subject hash and time", DIGEST),
        c("subject_hash", STR, "HMAC-SHA256 of the user id under the operator's erasure key", DIGEST),
        c("hash_scheme", STR, "how subject_hash was made", "hmac-sha256"),
        c("requested_by", STR, "who asked: a ticket or request reference, not the data subject", "DSR-2026-118"),
        c("requested_at", TS, "when it was asked", WHEN),
        c("completed_at", TS, "when it finished", WHEN),
        c("rows_deleted", pa.list_(pa.struct([("table", STR), ("rows", INT)])), "rows deleted per table", "[{table: calls, rows: 12}]"),
        c("total_rows_deleted", INT, "rows deleted over all tables", "57"),
        c("files_removed", INT, "data files removed from storage by the vacuum", "14"),
        c("rows_remaining", INT, "rows of the user still readable after the erasure (should be 0)", "0"),
    ),
)

UNREDACTION_LOG_TABLE = Table(
    "unredaction_log",
    "One row per decryption of an encrypt-mode call or document (replay, ablate, tracelake unredact): who, which run, when, what for, the outcome; never a value. Append-only",
    key=("entry_id",),
    partitioned_by=("decrypted_date",),
    columns=(
        c("entry_id", ID, "sha256 of run, purpose, call and time: every decryption is a new row", DIGEST),
        c("decrypted_at", TS, "when it was decrypted (in memory; the plaintext was never written)", WHEN),
        c("decrypted_date", DATE, "the day of decrypted_at (partition column)", DAY),
        c("purpose", STR, "replay, ablate or unredact", "replay"),
        c("actor", STR, "the operating-system account that ran the decryption (an operator, not a data subject)", "oncall"),
        c("run_id", STR, "the Dagster run, or cli-<uuid> for a command", "cli-6f1d2c"),
        c("candidate", STR, "the candidate replayed (null: not a candidate replay)", "support-answer-v4"),
        c("call_id", ID, "the call decrypted (null: a document of tracelake unredact without one)", CALL),
        c("trace_id", ID, "the trace its tokens are bound to", TRACE),
        c("key_ids", pa.list_(STR), "ids of the keys its tokens name (never a key)", "[k2026-11]"),
        c("tokens", INT, "distinct tokens decrypted", "3"),
        c("outcome", STR, "verified (the decrypted request hashes to the recorded hash), decrypted_request_mismatch, decryption_failed (nothing sent), or decrypted (unredact)", "verified"),
    ),
)

ROT_CHECKS_TABLE = Table(
    "rot_checks",
    "One row per call per rot check: the recorded request hash against the hash of the request re-rendered from today's stores",
    key=("call_id", "checked_at"),
    partitioned_by=("checked_date",),
    references={"call_id": "calls", "trace_id": "traces"},
    columns=(
        c("call_id", ID, "the call checked", CALL),
        c("checked_at", TS, "when the check ran", WHEN),
        c("checked_date", DATE, "UTC date of checked_at (partition column)", DAY),
        c("trace_id", ID, "the call's trace", TRACE),
        c("service", STR, "the call's route", "support.answer"),
        c("occurred_date", DATE, "the call's day", DAY),
        c("status", STR, "verified, rotted, impure or unverifiable", "rotted"),
        c("components", pa.list_(STR), "for rotted and impure calls: template_changed, template_missing, document_changed, document_missing, model_alias_moved, params_changed, tools_changed", "[document_changed]"),
        c("missing", pa.list_(STR), "for unverifiable calls: what the check lacked (recorded_hash, template_version, doc_ids, request, ...)", "[template_version]"),
        c("rotted_blocks", pa.list_(STR), "the request blocks that moved: system, model, params, tools, document:<doc_id>", "[document:kb-112]"),
        c("basis", STR, "what the comparison used: full_request, decrypted_values, keyed_block_hashes, redacted_values or none", "keyed_block_hashes"),
        c("replay_fidelity", STR, "what a replay of the call can be: exact (verified, or the full request bytes retained) or approximate", "approximate"),
        c("recorded_sha256", STR, "the call's recorded rendered_request_sha256", DIGEST),
        c("rerendered_sha256", STR, "sha256 of the request re-rendered today (null: nothing was re-rendered)", DIGEST),
        c("template_id", STR, "the template the check rendered", "support/answer"),
        c("template_version", STR, "the template version the check rendered", "v3"),
        c("template_sha256", STR, "sha256 of the template text the check used", DIGEST),
        c("index_snapshot", STR, "the document index snapshot the check read", "kb-2026-11-30"),
        c("model_alias", STR, "the model alias the check resolved", "answer-model"),
        c("model_snapshot", STR, "what the alias resolves to today", "claude-sonnet-4-5-20250929"),
        c("models_config_sha256", STR, "sha256 of the model alias store", DIGEST),
        c("params_config_sha256", STR, "sha256 of the params store", DIGEST),
        c("detail", pa.list_(STR), "which blocks moved and why, by block name and store key; never a value from the call", "[document:kb-112 text changed]"),
        c("run_id", STR, "the Dagster run of the check", "62003fcb-accd-40a5-a405-ef0a4bdb6d8f"),
        _record_sha256(),
    ),
)

# Counts and versions only: never a value that was redacted.
REDACTION_AUDIT_TABLE = Table(
    "redaction_audit",
    "One row per redacted span: a call's llm_call span (call_id set) or a span that belongs to no call; counts and versions, never a redacted value",
    key=("span_key",),
    partitioned_by=("occurred_date",),
    references={"span_key": "spans", "call_id": "calls", "trace_id": "traces"},
    columns=(
        c("span_key", ID, "the span redacted (a call's is its call_id)", CALL),
        c("call_id", ID, "the call redacted (null: a span that belongs to no call)", CALL),
        c("source_table", STR, "calls (the call and its llm_call span) or spans", "calls"),
        c("trace_id", ID, "the trace of the span", TRACE),
        c("occurred_date", DATE, "the span's day (partition column)", DAY),
        c("mode", STR, "placeholder, encrypt or synthetic", "placeholder"),
        c("policy_name", STR, "the redaction policy's name", "default"),
        c("policy_version", STR, "the redaction policy's version", "4"),
        c("policy_sha256", STR, "sha256 of the redaction policy file", DIGEST),
        c("detector_versions", pa.map_(STR, STR), "recognizers, presidio-analyzer, spacy, phonenumbers, the NER model (or off)", "{presidio-analyzer: 2.2.366}"),
        c("entity_counts", pa.map_(STR, INT), "distinct values replaced, by entity type", "{EMAIL_ADDRESS: 1, PERSON: 2}"),
        c("replacements", INT, "values replaced in all", "5"),
        c("fields", pa.list_(STR), "the columns that held something redacted", "[messages, output_text]"),
        c("encryption_key_id", STR, "the id of the key used in encrypt mode", "k2026-11"),
        c("hash_key_id", STR, "the id of the key used for keyed hashes", "h2026-11"),
        c("flags", pa.list_(STR), "what else happened (hash_mismatch_before_redaction, ...)", "[]"),
        c("redacted_at", TS, "when it was redacted", WHEN),
        _record_sha256(),
    ),
)

AGENT_EVENTS_TABLE = Table(
    "agent_events",
    "One row per event of any trace, in the structured agent-log shape (ids, numbers and flags; text stays in calls and spans)",
    key=("event_key",),
    partitioned_by=("occurred_date",),
    references={"event_key": "spans", "call_id": "calls", "trace_id": "traces"},
    columns=(
        c("ts", TS, "when the event happened", WHEN),
        c("session_id", STR, "the agent session", "as-56a2ae7c"),
        c("trace_id", ID, "the trace", TRACE),
        c("step_index", INT, "the event's step in its session, in time order (0-based)", "4"),
        c("event_type", STR, "session.start, llm.call, tool.invoke, agent.think, state.mutate or session.end", "tool.invoke"),
        c("agent_version", STR, "the agent's release", "orders-agent@1.8.2"),
        c("model", STR, "the model of an llm.call", "claude-sonnet-4-5-20250929"),
        c("provider", STR, "the model provider", "anthropic"),
        c("tokens_in", INT, "input tokens of an llm.call", "1830"),
        c("tokens_out", INT, "output tokens of an llm.call", "212"),
        c("cost_usd", FLOAT, "cost in USD of an llm.call", "0.0087"),
        c("latency_ms", FLOAT, "milliseconds the event took", "1840.5"),
        c("tool_called", STR, "the tool a tool.invoke ran", "lookup_order"),
        c("tool_success", BOOL, "the tool call succeeded", "true"),
        c("semantic_error", STR, "the class the source itself logged for the step, if any (findings are in semantic_errors)", "tool_error_ignored"),
        c("user_tier", STR, "the session's user tier", "pro"),
        c("feature_flag", STR, "the session's feature flag", "new-planner"),
        c("event_key", ID, "the event's span_key in spans", CALL),
        c("event_id", STR, "the event's id in its source", "ev-000231"),
        c("parent_event_id", STR, "the parent event's id in its source", "ev-000229"),
        c("call_id", ID, "the call of an llm.call event (null otherwise)", CALL),
        c("source_format", STR, "the format it was read from", "agent_events"),
        c("service", STR, "the route", "agent.orders"),
        c("status", STR, "ok or error", "ok"),
        c("finish_reason", STR, "the finish reason of an llm.call", "tool_use"),
        c("http_status", INT, "the HTTP status a tool or call returned, where logged", "200"),
        c("source_step_index", INT, "the step number the source wrote (null: it wrote none)", "4"),
        c("session_total_tokens", INT, "session.end: the session's total tokens as the source reported them", "5850"),
        c("occurred_date", DATE, "UTC date of ts (partition column)", DAY),
        _record_sha256(),
    ),
)

SEMANTIC_ERRORS_TABLE = Table(
    "semantic_errors",
    "One row per finding: trace x error class x detector x affected step, with confidence and evidence",
    key=("finding_id",),
    partitioned_by=("occurred_date",),
    references={"trace_id": "traces", "call_id": "calls", "event_key": "agent_events"},
    columns=(
        c("finding_id", ID, "sha256 of trace, class, detector, version and step", DIGEST),
        c("trace_id", ID, "the trace judged", TRACE),
        c("session_id", STR, "the session", "as-56a2ae7c"),
        c("call_id", ID, "the call of the affected step, if it is one", CALL),
        c("event_key", ID, "the affected step's event_key in agent_events", CALL),
        c("occurred_date", DATE, "the trace's day (partition column)", DAY),
        c("error_class", STR, "hallucination_detected, tool_error_ignored, truncated, upstream_data_missing, cost_anomaly, policy_refusal, ...", "truncated"),
        c("is_error", BOOL, "false for classes that are not errors (policy_refusal: an expected refusal)", "true"),
        c("detector", STR, "heuristic or llm_judge", "heuristic"),
        c("detector_version", STR, "the detector's version", "3"),
        c("confidence", FLOAT, "the detector's confidence, 0-1", "0.9"),
        c("evidence", TEXT, "a short quote or reason (redacted text)", "finish_reason=length at step 3"),
        c("affected_step", INT, "the step where the error shows", "3"),
        c("cause_step", INT, "the earlier step it grew from, when it is not the affected one", "2"),
        c("judged_with_probability", FLOAT, "probability the trace was judged with (1.0 for heuristics): weigh findings by 1/p", "0.2"),
        c("judge_prompt_sha256", STR, "sha256 of the judge prompt used (llm_judge)", DIGEST),
        c("request_key", STR, "the judge's request in llm_requests (llm_judge)", DIGEST),
        c("simulated", BOOL, "produced by tracelake's LLM simulator, not a model", "false"),
        _record_sha256(),
    ),
)

STATE_VIOLATIONS_TABLE = Table(
    "state_violations",
    "One row per violation of a trace's message history (the first one of a trace marked)",
    key=("violation_id",),
    partitioned_by=("occurred_date",),
    references={"trace_id": "traces", "event_key": "agent_events"},
    columns=(
        c("violation_id", ID, "sha256 of trace, code and step", DIGEST),
        c("trace_id", ID, "the trace", TRACE),
        c("session_id", STR, "the session", "as-56a2ae7c"),
        c("event_key", ID, "the violating step's event_key in agent_events", CALL),
        c("occurred_date", DATE, "the trace's day (partition column)", DAY),
        c("code", STR, "what was violated: message_after_interrupt, tool_result_without_call, ...", "message_after_interrupt"),
        c("step_index", INT, "the violating step", "4"),
        c("detail", STR, "what happened, in words (no content)", "state.mutate after step 4"),
        c("first_in_trace", BOOL, "the trace's first violation", "true"),
        c("validator_version", STR, "the validator's version", "1"),
        _record_sha256(),
    ),
)

JUDGE_CALIBRATION_TABLE = Table(
    "judge_calibration",
    "One row per day x judge prompt x check: the LLM judge's self-agreement and agreement with human feedback",
    key=("occurred_date", "prompt_sha256", "check"),
    partitioned_by=("occurred_date",),
    columns=(
        c("occurred_date", DATE, "the day judged (partition column)", DAY),
        c("judge", STR, "the judge", "llm_judge"),
        c("prompt_version", STR, "the judge prompt's version", "hallucination-2"),
        c("prompt_sha256", STR, "sha256 of the judge prompt", DIGEST),
        c("check", STR, "self_agreement or human_feedback", "self_agreement"),
        c("items", INT, "items compared", "40"),
        c("agreements", INT, "items that agreed", "37"),
        c("agreement_rate", FLOAT, "agreements / items", "0.925"),
        c("kappa", FLOAT, "Cohen's kappa", "0.81"),
        c("judged", INT, "traces judged", "312"),
        c("judge_errors", INT, "judge requests that failed", "0"),
        c("simulated", BOOL, "produced by tracelake's LLM simulator", "false"),
        c("computed_at", TS, "when it was computed", WHEN),
        _record_sha256(),
    ),
)

# Never a request's content: its hash.
LLM_REQUESTS_TABLE = Table(
    "llm_requests",
    "One row per LLM request tracelake sent (replay, judge, ablation, debug): tokens, cost, status; keyed by the request's content address",
    key=("request_key",),
    partitioned_by=("sent_date",),
    references={"call_id": "calls"},
    columns=(
        c("request_key", ID, "sha256 of 'request_sha256|mode|sample_index': the content address", DIGEST),
        c("request_sha256", STR, "sha256 of the canonical request sent", DIGEST),
        c("purpose", STR, "replay, judge, ablation or debug", "replay"),
        c("mode", STR, "the replay mode or judge check", "diff"),
        c("sample_index", INT, "the sample's number for repeated samples", "0"),
        c("candidate", STR, "the replay candidate", "support-answer-v4"),
        c("call_id", ID, "the call the request replays or judges", CALL),
        c("model", STR, "the model requested", "claude-sonnet-4-5-20250929"),
        c("backend", STR, "simulator, api, bedrock or vertex", "api"),
        c("batch_id", STR, "the Message Batch it went in, if any", "msgbatch_01HkcTjaV5uDC8jWR4ZsDV8d"),
        c("custom_id", STR, "its custom_id in the batch", "r-7d1f0c4e9b2a"),
        c("attempts", INT, "HTTP attempts (direct) or batch submissions (batch) it took", "1"),
        c("status", STR, "succeeded, errored, expired or canceled", "succeeded"),
        c("error", TEXT, "error type and the provider's message; never request content", "not_found_error: model: claude-sonnet-4-20250514"),
        c("stop_reason", STR, "the response's stop reason", "end_turn"),
        c("input_tokens", INT, "input tokens billed", "1830"),
        c("output_tokens", INT, "output tokens billed", "212"),
        c("cache_read_input_tokens", INT, "input tokens read from the prompt cache", "1024"),
        c("cache_write_input_tokens", INT, "input tokens written to the prompt cache", "0"),
        c("cost_usd", FLOAT, "cost in USD", "0.0041"),
        c("latency_ms", FLOAT, "milliseconds the request took (direct)", "2211.0"),
        c("simulated", BOOL, "produced by tracelake's simulator, not a model", "false"),
        c("sampling_json", JSON, "the sampling parameters asked for and whether each was accepted", '{"temperature": {"value": 0.3, "accepted": true}}'),
        c("response_json", JSON, "the response body (redacted)", '{"content": […]}'),
        c("sent_at", TS, "when it was sent", WHEN),
        c("sent_date", DATE, "UTC date of sent_at (partition column)", DAY),
        c("run_id", STR, "the Dagster run that sent it", "94e21260-a962-4381-8f1f-10453f53a956"),
        _record_sha256(),
        c("api_version", STR, "the anthropic-version header it was sent under", "2026-10-21"),
        c("sent_request_sha256", STR, "sha256 of the body as sent (refused parameters removed, cache marks added); request_sha256 is the one asked", DIGEST),
        c("dropped_json", JSON, "parameters removed before sending, and why", '{"temperature": "api_2026_10_21_refuses_sampling"}'),
        c("substituted_from", STR, "the retired model the call was recorded on, when the request asks for its substitute", "claude-sonnet-4-5-20250929"),
        c("runs", INT, "how many runs sent it (a failed request is sent again by later runs, up to the resource's retry_runs)", "2"),
        c("attempts_json", JSON, "every attempt of every run: run_id, at, via (batch id or direct), status, error", '[{"run_id": "94e2…", "via": "msgbatch_01…", "status": "errored"}, …]'),
    ),
)

LLM_BATCHES_TABLE = Table(
    "llm_batches",
    "One row per Message Batch submitted, written before the first poll so a killed run resumes it",
    key=("batch_id",),
    partitioned_by=("sent_date",),
    columns=(
        c("batch_id", STR, "the provider's batch id, or submit_<uuid> for the write-ahead row written before batches.create", "msgbatch_01HkcTjaV5uDC8jWR4ZsDV8d"),
        c("state", STR, "in_progress, canceling, ended (the API's processing_status), not_found (gone when resumed), results_expired (past the 29-day download window); a write-ahead row: creating, created or not_created", "ended"),
        c("request_count", INT, "requests in the batch", "526"),
        c("succeeded", INT, "requests that succeeded", "526"),
        c("errored", INT, "requests that errored", "0"),
        c("expired", INT, "requests that expired", "0"),
        c("canceled", INT, "requests that were canceled", "0"),
        c("request_keys_json", JSON, "the request keys (= custom_ids) it holds, a JSON list", '["r-7d1f…", …]'),
        c("backend", STR, "simulator, api, bedrock or vertex", "api"),
        c("simulated", BOOL, "sent to tracelake's simulator", "false"),
        c("created_at", TS, "when it was created", WHEN),
        c("ended_at", TS, "when it ended", WHEN),
        c("sent_date", DATE, "UTC date of created_at (partition column)", DAY),
        c("run_id", STR, "the Dagster run that created it", "94e21260-a962-4381-8f1f-10453f53a956"),
        _record_sha256(),
        c("linked_batch_id", STR, "a provider batch: the write-ahead row it was created under; a write-ahead row: the provider batch it became", "submit_5b0c…"),
        c("request_bytes", INT, "bytes of the batch's create request (the API takes up to 256 MB)", "1048576"),
        c("estimated_usd", FLOAT, "the most its requests can cost: what a run's budget counts while the batch is open", "0.41"),
        c("adopted", BOOL, "found at the provider by its custom_ids after the run that created it died before recording it", "false"),
    ),
)

# "old" is what the new answer is compared with: the recorded answer, or for a diff replay
# the baseline replay of the recorded request sent beside it.
REPLAYS_TABLE = Table(
    "replays",
    "One row per replay: call x candidate x mode x sample (a state replay: x step), with fidelity, old and new output, verdict",
    key=("replay_id",),
    partitioned_by=("candidate", "day"),
    references={"call_id": "calls", "trace_id": "traces"},
    columns=(
        c("replay_id", ID, "sha256 of call, candidate, mode, sample and step", DIGEST),
        c("candidate", STR, "the candidate replayed (partition column)", "support-answer-v4"),
        c("candidate_revision", INT, "the candidate file's revision", "2"),
        c("day", DATE, "the day of history replayed (partition column)", DAY),
        c("call_id", ID, "the call replayed", CALL),
        c("trace_id", ID, "the call's trace", TRACE),
        c("session_id", STR, "the call's session", "sess-8812"),
        c("service", STR, "the call's route", "support.answer"),
        c("mode", STR, "capture, pinned, class_rate, diff or state", "diff"),
        c("sample_index", INT, "the sample's number", "0"),
        c("step", INT, "the session step of a state replay", "2"),
        c("fidelity", STR, "exact, approximate or ineligible", "approximate"),
        c("fidelity_reasons", pa.list_(STR), "why: rotted components, redaction, missing capture items", "[redacted_placeholders]"),
        c("segment", SEGMENT, "the call's segment fields", "{user_tier: pro, language: en}"),
        c("segment_key", STR, "service/language/user_tier/length", "support.answer/en/pro/long"),
        c("language", STR, "the call's language", "en"),
        c("inclusion_probability", FLOAT, "the probability the call was sampled for the replay: weigh by 1/p", "0.2"),
        c("recorded_request_sha256", STR, "the call's recorded request hash", DIGEST),
        c("request_sha256", STR, "sha256 of the request sent", DIGEST),
        c("request_key", STR, "the request's row in llm_requests", DIGEST),
        c("baseline_request_key", STR, "the baseline request's row in llm_requests (diff)", DIGEST),
        c("old_source", STR, "what old_output is: recorded, baseline, or recorded_baseline (the recorded answer, compared with a replay on a substitute model)", "baseline"),
        c("old_output", TEXT, "the answer compared with (redacted)", "Seu pedido foi enviado …"),
        c("new_output", TEXT, "the candidate's answer (redacted)", "Seu pedido saiu hoje …"),
        c("old_finish_reason", STR, "old answer's finish reason", "stop"),
        c("new_finish_reason", STR, "new answer's finish reason", "length"),
        c("old_tool_calls_json", JSON, "old answer's tool calls, as JSON", "[]"),
        c("new_tool_calls_json", JSON, "new answer's tool calls, as JSON", "[]"),
        c("old_model", STR, "the model that gave the old answer", "claude-sonnet-4-5-20250929"),
        c("new_model", STR, "the model that gave the new answer", "claude-sonnet-5"),
        c("divergence", pa.list_(STR), "capture/pinned: what moved against the recorded call (output_text, finish_reason, tool_calls, response_model)", "[output_text]"),
        c("status", STR, "the LLM result's status (succeeded, errored, expired, ...) or not_sent", "succeeded"),
        c("error", TEXT, "the error, when not succeeded", "overloaded_error"),
        c("input_tokens", INT, "input tokens of the new request", "1830"),
        c("output_tokens", INT, "output tokens of the new request", "212"),
        c("cache_read_input_tokens", INT, "input tokens read from the prompt cache", "1024"),
        c("cache_write_input_tokens", INT, "input tokens written to the prompt cache", "0"),
        c("cost_usd", FLOAT, "cost in USD of the new request (and the baseline's, for diff)", "0.0041"),
        c("judge_cost_usd", FLOAT, "cost of the pairwise judge's requests that compared old and new (diff)", "0.0006"),
        c("verdict", STR, "improved, regressed, same or inconclusive", "regressed"),
        c("decided_by", STR, "the signal or judge that decided the verdict", "finish_reason"),
        c("reproduced", BOOL, "class_rate: this sample reproduced the failure", "true"),
        c("class_rate", FLOAT, "class_rate: the call's share of samples that reproduced it", "0.7"),
        c("class_rate_low", FLOAT, "lower bound of its Wilson 95% interval", "0.40"),
        c("class_rate_high", FLOAT, "upper bound of its Wilson 95% interval", "0.89"),
        c("stop_reason", STR, "state: why the session stopped (finished, step_limit, no_recorded_result:<tool>, error)", "finished"),
        c("simulated", BOOL, "produced by tracelake's simulator, not a model", "false"),
        c("run_id", STR, "the Dagster run of the replay", "94e21260-a962-4381-8f1f-10453f53a956"),
        _record_sha256(),
        c("substituted_from", STR, "the retired model the call was recorded on; the replay (and a diff's baseline) ran on its substitute", "claude-sonnet-4-5-20250929"),
    ),
)

_SHARES = tuple(
    c(f"{verdict}_{stat}", FLOAT, f"{what} of the {verdict} share", "0.21")
    for verdict in ("improved", "regressed", "same")
    for stat, what in (
        ("share", "the weighted value"),
        ("low", "Wilson 95% lower bound"),
        ("high", "Wilson 95% upper bound"),
    )
)
REPLAY_SUMMARY_TABLE = Table(
    "replay_summary",
    "One row per candidate x day x mode x fidelity x model basis x segment ('all': reweighted by inverse inclusion probability): improved, regressed, same with intervals and tests",
    key=("candidate", "day", "mode", "fidelity", "model_basis", "segment_key"),
    partitioned_by=("candidate", "day"),
    columns=(
        c("candidate", STR, "the candidate (partition column)", "support-answer-v4"),
        c("day", DATE, "the day of history replayed (partition column)", DAY),
        c("mode", STR, "the replay mode", "diff"),
        c("fidelity", STR, "exact or approximate (never mixed)", "approximate"),
        c("segment_key", STR, "service/language/user_tier/length, or all", "support.answer/en/free/long"),
        c("service", STR, "the segment's route (null for all)", "support.answer"),
        c("language", STR, "the segment's language", "en"),
        c("user_tier", STR, "the segment's user tier", "free"),
        c("length", STR, "the segment's input-length bucket", "long"),
        c("n", INT, "replays in the segment", "40"),
        c("weight", FLOAT, "sum of 1/inclusion_probability", "200.0"),
        c("effective_n", FLOAT, "Kish effective sample size", "38.2"),
        c("improved", INT, "replays judged improved", "0"),
        c("regressed", INT, "replays judged regressed", "40"),
        c("same", INT, "replays judged the same", "0"),
        c("inconclusive", INT, "replays with no verdict (errors, ...)", "0"),
        *_SHARES,
        c("delta", FLOAT, "improved share minus regressed share", "-1.0"),
        c("delta_low", FLOAT, "lower bound of delta's 95% interval", "-1.0"),
        c("delta_high", FLOAT, "upper bound of delta's 95% interval", "-0.88"),
        c("sign_test_p", FLOAT, "two-sided sign test p-value of improved vs regressed", "1.8e-12"),
        c("bh_p", FLOAT, "Benjamini-Hochberg adjusted p-value over the day's segments", "2.18e-11"),
        c("significant_regression", BOOL, "the segment regresses significantly (bh_p < 0.05)", "true"),
        c("significant_improvement", BOOL, "the segment improves significantly", "false"),
        c("aggregate_improves", BOOL, "the all row improves", "true"),
        c("hides_regression", BOOL, "the aggregate improves while a segment significantly regresses", "true"),
        c("regressed_segments", pa.list_(STR), "the segments that significantly regress (all row)", "[support.answer/en/free/long]"),
        c("cost_usd", FLOAT, "cost in USD of the segment's replays", "0.0578"),
        c("input_tokens", INT, "input tokens of the segment's replays", "73200"),
        c("output_tokens", INT, "output tokens of the segment's replays", "8480"),
        c("simulated", BOOL, "produced by tracelake's simulator", "false"),
        _record_sha256(),
        c("model_basis", STR, "recorded_model, or substituted (replayed on a retired model's substitute): never in one group", "substituted"),
    ),
)

ABLATIONS_TABLE = Table(
    "ablations",
    "One row per ablation variant of a bad call against a good sibling: the failure rate with the difference reversed or introduced",
    key=("ablation_id",),
    references={"bad_call_id": "calls", "good_call_id": "calls"},
    columns=(
        c("ablation_id", ID, "sha256 of bad call, good call, variant request hash and samples", DIGEST),
        c("bad_call_id", ID, "the bad call", CALL),
        c("good_call_id", ID, "the known-good sibling", CALL),
        c("applied_to", STR, "bad: the bad request with the difference reversed; good: the good request with the bad call's value", "bad"),
        c("difference_index", INT, "0 for the request as recorded (the baseline), else the difference's number in `tracelake siblings`", "2"),
        c("difference", STR, "the difference as `tracelake siblings` names it", "document kb-112 vs kb-118"),
        c("block", STR, "the request block changed", "document:kb-112"),
        c("replacement", STR, "baseline, sibling (the good call's block) or neutral (a passage of the same token length)", "sibling"),
        c("request_sha256", STR, "sha256 of the variant request", DIGEST),
        c("symptom", STR, "what counts as a failure: the bad call's own symptom", "language_mismatch"),
        c("samples", INT, "samples drawn", "10"),
        c("failures", INT, "samples that failed", "2"),
        c("failure_rate", FLOAT, "failures / samples", "0.2"),
        c("ci_low", FLOAT, "Wilson 95% lower bound", "0.06"),
        c("ci_high", FLOAT, "Wilson 95% upper bound", "0.51"),
        c("model", STR, "the model sampled", "claude-sonnet-5"),
        c("temperature", FLOAT, "the temperature sampled at", "1.0"),
        c("cost_usd", FLOAT, "cost in USD", "0.012"),
        c("simulated", BOOL, "produced by tracelake's simulator", "false"),
        c("run_id", STR, "the run or command that made it", "cli"),
        c("created_at", TS, "when it was made", WHEN),
        _record_sha256(),
    ),
)

REGRESSION_CASES_TABLE = Table(
    "regression_cases",
    "One row per reproduced bug promoted to a dataset: the frozen request, the bad output, a note and where it came from",
    key=("case_id",),
    references={"call_id": "calls", "trace_id": "traces"},
    columns=(
        c("case_id", ID, "sha256 of dataset and call_id: promoting the same call again updates its note", DIGEST),
        c("dataset", STR, "the dataset it was promoted to", "support-regressions"),
        c("call_id", ID, "the call promoted", CALL),
        c("trace_id", ID, "the call's trace", TRACE),
        c("service", STR, "the call's route", "support.answer"),
        c("template_id", STR, "the call's template", "support/answer"),
        c("template_version", STR, "the call's template version", "v3"),
        c("occurred_at", TS, "when the call happened", WHEN),
        c("request_json", JSON, "the frozen request (canonical JSON, redacted)", '{"max_tokens":1024,…}'),
        c("request_sha256", STR, "its hash", DIGEST),
        c("bad_output_text", TEXT, "the bad output as recorded (redacted)", "I can't find your order …"),
        c("bad_finish_reason", STR, "its finish reason", "stop"),
        c("symptom", STR, "the symptom seen in it", "language_mismatch"),
        c("segment", SEGMENT, "the call's segment fields", "{language: pt-BR}"),
        c("note", TEXT, "what the person who promoted it wrote", "answers in English to a pt-BR user"),
        c("source_uri", STR, "the raw object the call came from", "s3://acme-llm-logs/prod/2026/11/29/14-000.jsonl.gz"),
        c("source_line", INT, "its line in that object", "1207"),
        c("replay_fidelity", STR, "exact or approximate", "approximate"),
        c("promoted_by", STR, "who promoted it", "ana"),
        c("promoted_at", TS, "when", WHEN),
        _record_sha256(),
    ),
)

# fmt: on
ALL = (
    CALLS_TABLE,
    SPANS_TABLE,
    TRACES_TABLE,
    INGEST_LOG_TABLE,
    QUARANTINE_TABLE,
    REDACTION_AUDIT_TABLE,
    RETENTION_TABLE,
    RETENTION_COVERAGE_TABLE,
    ROT_CHECKS_TABLE,
    ERASURE_LOG_TABLE,
    UNREDACTION_LOG_TABLE,
    AGENT_EVENTS_TABLE,
    SEMANTIC_ERRORS_TABLE,
    STATE_VIOLATIONS_TABLE,
    JUDGE_CALIBRATION_TABLE,
    REPLAYS_TABLE,
    REPLAY_SUMMARY_TABLE,
    LLM_REQUESTS_TABLE,
    LLM_BATCHES_TABLE,
    ABLATIONS_TABLE,
    REGRESSION_CASES_TABLE,
)
SPECS: dict[str, Table] = {t.name: t for t in ALL}
TABLES: dict[str, pa.Schema] = {t.name: t.schema for t in ALL}
KEYS: dict[str, tuple[str, ...]] = {t.name: t.key for t in ALL}
PARTITIONS: dict[str, tuple[str, ...]] = {t.name: t.partitioned_by for t in ALL}

CALLS = TABLES["calls"]
SPANS = TABLES["spans"]
TRACES = TABLES["traces"]
INGEST_LOG = TABLES["ingest_log"]
QUARANTINE = TABLES["quarantine"]
RETENTION = TABLES["retention"]
RETENTION_COVERAGE = TABLES["retention_coverage"]
ERASURE_LOG = TABLES["erasure_log"]
ROT_CHECKS = TABLES["rot_checks"]
REDACTION_AUDIT = TABLES["redaction_audit"]
AGENT_EVENTS = TABLES["agent_events"]
SEMANTIC_ERRORS = TABLES["semantic_errors"]
STATE_VIOLATIONS = TABLES["state_violations"]
JUDGE_CALIBRATION = TABLES["judge_calibration"]
LLM_REQUESTS = TABLES["llm_requests"]
LLM_BATCHES = TABLES["llm_batches"]
REPLAYS = TABLES["replays"]
REPLAY_SUMMARY = TABLES["replay_summary"]
ABLATIONS = TABLES["ablations"]
REGRESSION_CASES = TABLES["regression_cases"]
JUDGE_TABLES = ("agent_events", "semantic_errors", "state_violations", "judge_calibration")
