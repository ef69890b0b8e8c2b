"""Arrow schemas for every tracelake table, declared once.

Timestamps are ``timestamp("us", "UTC")`` (delta-rs writes naive timestamps as
``timestampNtz``, which older Spark and Trino refuse). Arbitrary JSON is stored
as JSON text, because Arrow has no "any" type. Strings that can be long (text a
user or a model wrote) are ``large_string`` so that polars round-trips them
without a cast.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = "1"

TS = pa.timestamp("us", tz="UTC")
JSON = pa.large_string()
TEXT = pa.large_string()

# A content part of a message: text, tool_call, tool_result, thinking, image, or
# anything else (kept verbatim in native_json so nothing a source sent is lost).
PART = pa.struct(
    [
        ("type", pa.string()),
        ("text", TEXT),
        ("tool_call_id", pa.string()),
        ("tool_name", pa.string()),
        ("arguments_json", JSON),
        ("content_json", JSON),
        ("is_error", pa.bool_()),
        ("native_json", JSON),
    ]
)
MESSAGE = pa.struct([("role", pa.string()), ("name", pa.string()), ("parts", pa.list_(PART))])
TOOL_DEFINITION = pa.struct(
    [
        ("name", pa.string()),
        ("description", TEXT),
        ("schema_json", JSON),
        ("native_json", JSON),
    ]
)
PARAMS = pa.struct(
    [
        ("max_tokens", pa.int64()),
        ("temperature", pa.float64()),
        ("top_p", pa.float64()),
        ("top_k", pa.int64()),
        ("seed", pa.int64()),
        ("stop_sequences", pa.list_(pa.string())),
    ]
)
DOCUMENT = pa.struct(
    [
        ("doc_id", pa.string()),
        ("rank", pa.int32()),
        ("score", pa.float64()),
        ("text", TEXT),
        ("text_sha256", pa.string()),
        ("tokens", pa.int64()),
    ]
)
RETRIEVAL = pa.struct(
    [
        ("embedding_model", pa.string()),
        ("index_snapshot", pa.string()),
        ("query_text", TEXT),
        ("documents", pa.list_(DOCUMENT)),
    ]
)
TOOL_EXECUTION = pa.struct(
    [
        ("span_id", pa.string()),
        ("tool_call_id", pa.string()),
        ("name", pa.string()),
        ("arguments_json", JSON),
        ("result_json", JSON),
        ("is_error", pa.bool_()),
        ("started_at", TS),
        ("ended_at", TS),
    ]
)
USAGE = pa.struct(
    [
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("cache_read_input_tokens", pa.int64()),
        ("cache_write_input_tokens", pa.int64()),
        ("total_tokens", pa.int64()),
        ("cost_usd", pa.float64()),
    ]
)
FEEDBACK = pa.struct(
    [
        ("source", pa.string()),
        ("name", pa.string()),
        ("value_number", pa.float64()),
        ("value_string", pa.string()),
        ("comment", TEXT),
        ("created_at", TS),
        # the source's id of the score or feedback item: merging it again is a no-op
        ("id", pa.string()),
        # call, trace or session: what the source attached it to
        ("target_level", pa.string()),
    ]
)
# One hash per request block ("system", "messages[3]", "tools", "params",
# "model", "document:<doc_id>"); see record/canonical.py. algorithm: "sha256",
# or "hmac-sha256" for blocks that may hold PII, keyed at redaction
# (pipelines/redact/block_hashes.py); null means sha256.
BLOCK_HASH = pa.struct(
    [("block", pa.string()), ("sha256", pa.string()), ("tokens", pa.int64()), ("algorithm", pa.string())]
)

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

CALLS = pa.schema(
    [
        # identity and provenance
        ("call_id", pa.string()),
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_span_id", pa.string()),
        ("session_id", pa.string()),
        ("conversation_id", pa.string()),
        ("user_id", pa.string()),
        ("source_format", pa.string()),
        ("source_uri", pa.string()),
        ("source_etag", pa.string()),
        ("source_line", pa.int64()),
        ("ingested_at", TS),
        ("schema_version", pa.string()),
        ("record_sha256", pa.string()),
        # time
        ("occurred_at", TS),
        ("ended_at", TS),
        ("first_token_at", TS),
        ("occurred_date", pa.date32()),
        ("latency_ms", pa.float64()),
        # application
        ("service", pa.string()),
        ("environment", pa.string()),
        ("release", pa.string()),
        ("tags", pa.list_(pa.string())),
        ("segment", pa.map_(pa.string(), pa.string())),
        # prompt ingredients
        ("template_id", pa.string()),
        ("template_version", pa.string()),
        ("template_label", pa.string()),
        ("template_variables_json", JSON),
        # model
        ("provider", pa.string()),
        ("request_model", pa.string()),
        # the application-level alias request_model was resolved from, if any
        ("model_alias", pa.string()),
        ("response_model", pa.string()),
        ("endpoint", pa.string()),
        # params
        ("params", PARAMS),
        ("params_extra_json", JSON),
        # request
        ("system_text", TEXT),
        ("messages", pa.list_(MESSAGE)),
        ("tool_definitions", pa.list_(TOOL_DEFINITION)),
        ("request_json", JSON),
        # retrieval and tools around the call
        ("retrieval", RETRIEVAL),
        ("tool_executions", pa.list_(TOOL_EXECUTION)),
        # response
        ("output_text", TEXT),
        ("output_messages", pa.list_(MESSAGE)),
        ("finish_reason", pa.string()),
        ("stop_reason_native", pa.string()),
        ("response_id", pa.string()),
        ("provider_request_id", pa.string()),
        ("previous_response_id", pa.string()),
        # usage
        ("usage", USAGE),
        # outcome
        ("status", pa.string()),
        ("error_type", pa.string()),
        ("error_message", TEXT),
        ("feedback", pa.list_(FEEDBACK)),
        ("eval_score", pa.float64()),
        ("escalated", pa.bool_()),
        ("guardrail_hit", pa.bool_()),
        ("flags", pa.list_(pa.string())),
        # hashing
        ("rendered_request_sha256", pa.string()),
        ("rendered_request_uri", pa.string()),
        ("request_sha256", pa.string()),
        ("request_hash_matches", pa.bool_()),
        ("block_hashes", pa.list_(BLOCK_HASH)),
        # the rot check's ingredient-set key, derived on every write (pipelines/rot/set_key.py)
        ("rot_set_key", pa.string()),
        # capture quality: the replayability of the call
        ("context_complete", pa.bool_()),
        ("content_captured", pa.bool_()),
        ("truncated", pa.bool_()),
        ("capture_missing", pa.list_(pa.string())),
        # anything a source sent that has no column above, as JSON
        ("extra_json", JSON),
        # the library that recorded the call ("name/version": an OpenTelemetry
        # instrumentation scope, an SDK), where a source says
        ("instrumentation_scope", pa.string()),
    ]
)

SPANS = pa.schema(
    [
        ("span_key", pa.string()),
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_span_id", pa.string()),
        ("session_id", pa.string()),
        ("user_id", pa.string()),
        ("call_id", pa.string()),
        ("source_format", pa.string()),
        ("source_uri", pa.string()),
        ("source_etag", pa.string()),
        ("source_line", pa.int64()),
        ("ingested_at", TS),
        ("record_sha256", pa.string()),
        # llm_call, tool, retrieval, think, state, session_start, session_end, check, other
        ("kind", pa.string()),
        ("name", pa.string()),
        ("step_index", pa.int64()),
        ("occurred_at", TS),
        ("ended_at", TS),
        ("occurred_date", pa.date32()),
        ("duration_ms", pa.float64()),
        ("status", pa.string()),
        ("tool_name", pa.string()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("cost_usd", pa.float64()),
        ("attributes_json", JSON),
    ]
)

TRACES = pa.schema(
    [
        ("trace_id", pa.string()),
        ("session_id", pa.string()),
        ("user_id", pa.string()),
        ("source_format", pa.string()),
        ("service", pa.string()),
        ("environment", pa.string()),
        ("segment", pa.map_(pa.string(), pa.string())),
        ("started_at", TS),
        ("ended_at", TS),
        ("occurred_date", pa.date32()),
        ("duration_ms", pa.float64()),
        ("call_count", pa.int64()),
        ("span_count", pa.int64()),
        ("step_count", pa.int64()),
        ("tool_call_count", pa.int64()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("total_tokens", pa.int64()),
        ("cost_usd", pa.float64()),
        ("models", pa.list_(pa.string())),
        ("error_count", pa.int64()),
        # the session's own verdict where a source gives one (session.end), else derived
        ("outcome", pa.string()),
        ("negative_feedback", pa.bool_()),
        ("escalated", pa.bool_()),
        ("record_sha256", pa.string()),
        ("rolled_up_at", TS),
    ]
)

INGEST_LOG = pa.schema(
    [
        ("source_key", pa.string()),
        ("etag", pa.string()),
        ("source_uri", pa.string()),
        ("size_bytes", pa.int64()),
        ("last_modified", TS),
        ("partition_date", pa.date32()),
        ("source_format", pa.string()),
        ("records_read", pa.int64()),
        ("records_ingested", pa.int64()),
        ("records_quarantined", pa.int64()),
        ("calls", pa.int64()),
        ("spans", pa.int64()),
        # ok: every record ingested; partial: some quarantined; failed: object unreadable
        ("status", pa.string()),
        ("run_id", pa.string()),
        ("ingested_at", TS),
        ("record_sha256", pa.string()),
    ]
)

QUARANTINE = pa.schema(
    [
        ("quarantine_id", pa.string()),
        ("source_key", pa.string()),
        ("source_uri", pa.string()),
        ("etag", pa.string()),
        # 1-based line for line-oriented objects; null when the whole object failed
        ("line", pa.int64()),
        ("byte_offset", pa.int64()),
        # object: the object as a whole could not be read; record: one record in it
        ("scope", pa.string()),
        ("source_format", pa.string()),
        ("error_class", pa.string()),
        # says what was expected; never quotes the record (it may hold PII)
        ("message", pa.string()),
        ("run_id", pa.string()),
        ("ingested_at", TS),
        ("ingested_date", pa.date32()),
    ]
)

# One retention decision per call (pipelines/retention). The segment columns
# are copied from the call so that coverage and reweighting need no join; an
# absent value is "unknown", never null, because nulls never match in a merge key.
RETENTION = pa.schema(
    [
        ("call_id", pa.string()),
        ("trace_id", pa.string()),
        ("occurred_date", pa.date32()),
        ("service", pa.string()),
        ("user_tier", pa.string()),
        ("language", pa.string()),
        ("input_bucket", pa.string()),
        # full: every byte kept past the hot window; ingredients: text swept, ingredients and hashes kept
        ("tier", pa.string()),
        # every rule that matched: own rules, "trace:<rule>" when another call of the trace matched, or "sampled"
        ("reasons", pa.list_(pa.string())),
        # probability that this call is kept in full: 1.0 when a rule keeps it, else its trace's sampling rate
        ("keep_probability", pa.float64()),
        ("sampling_rate", pa.float64()),
        ("policy_version", pa.string()),
        ("policy_sha256", pa.string()),
        ("decided_at", TS),
        # when the sweep last made sure this call holds no full text (null: not swept)
        ("swept_at", TS),
        ("record_sha256", pa.string()),
    ]
)

# Per segment (service x user tier x language x input-length bucket) over a window of days.
RETENTION_COVERAGE = pa.schema(
    [
        ("window_end", pa.date32()),
        ("window_start", pa.date32()),
        ("segment_key", pa.string()),
        ("service", pa.string()),
        ("user_tier", pa.string()),
        ("language", pa.string()),
        ("input_bucket", pa.string()),
        ("calls_seen", pa.int64()),
        ("kept_full", pa.int64()),
        ("kept_by_rule", pa.int64()),
        ("kept_by_sampling", pa.int64()),
        ("mean_sampling_rate", pa.float64()),
        # rule-kept calls plus the sampling rate summed over the rest: what "kept_full" should be near
        ("expected_full", pa.float64()),
        # Horvitz-Thompson estimate of calls_seen from the full-kept calls alone (sum of 1/keep_probability)
        ("estimated_calls", pa.float64()),
        # no call of the segment kept in full in the window
        ("uncovered", pa.bool_()),
        ("policy_version", pa.string()),
        ("computed_at", TS),
        ("record_sha256", pa.string()),
    ]
)

# One row per `tracelake forget`: no personal data, only a keyed hash of the user id.
ERASURE_LOG = pa.schema(
    [
        ("erasure_id", pa.string()),
        # HMAC-SHA256 of the user id under the operator's erasure key
        ("subject_hash", pa.string()),
        ("hash_scheme", pa.string()),
        # who asked: a ticket or request reference, not the data subject
        ("requested_by", pa.string()),
        ("requested_at", TS),
        ("completed_at", TS),
        ("rows_deleted", pa.list_(pa.struct([("table", pa.string()), ("rows", pa.int64())]))),
        ("total_rows_deleted", pa.int64()),
        ("files_removed", pa.int64()),
        # rows of the user still readable after the erasure (should be 0)
        ("rows_remaining", pa.int64()),
    ]
)

# One row per call per rot-check run (pipelines/rot/check.py says what each value means).
ROT_CHECKS = pa.schema(
    [
        ("call_id", pa.string()),
        ("checked_at", TS),
        ("checked_date", pa.date32()),
        ("trace_id", pa.string()),
        ("service", pa.string()),
        ("occurred_date", pa.date32()),
        # verified | rotted | impure | unverifiable
        ("status", pa.string()),
        # for rotted (and impure) calls: template_changed, template_missing, document_changed,
        # document_missing, model_alias_moved, params_changed, tools_changed
        ("components", pa.list_(pa.string())),
        # for unverifiable calls: recorded_hash, template_version, doc_ids, request, ...
        ("missing", pa.list_(pa.string())),
        # the request blocks that moved: system, model, params, tools, document:<doc_id>
        ("rotted_blocks", pa.list_(pa.string())),
        # full_request | decrypted_values | keyed_block_hashes | redacted_values | none
        ("basis", pa.string()),
        # exact (verified, or the full request bytes retained) | approximate
        ("replay_fidelity", pa.string()),
        ("recorded_sha256", pa.string()),
        ("rerendered_sha256", pa.string()),
        # the store versions the check used
        ("template_id", pa.string()),
        ("template_version", pa.string()),
        ("template_sha256", pa.string()),
        ("index_snapshot", pa.string()),
        ("model_alias", pa.string()),
        ("model_snapshot", pa.string()),
        ("models_config_sha256", pa.string()),
        ("params_config_sha256", pa.string()),
        # which blocks moved and why, by block name and store key; never a value from the call
        ("detail", pa.list_(pa.string())),
        ("run_id", pa.string()),
        ("record_sha256", pa.string()),
    ]
)

# One row per redacted call (call_id), or per redacted span that belongs to no
# call (source_table "spans": call_id holds its span_key). Counts and versions
# only: never a value that was redacted.
REDACTION_AUDIT = pa.schema(
    [
        ("call_id", pa.string()),
        ("source_table", pa.string()),
        ("trace_id", pa.string()),
        ("occurred_date", pa.date32()),
        # placeholder | encrypt | synthetic
        ("mode", pa.string()),
        ("policy_name", pa.string()),
        ("policy_version", pa.string()),
        ("policy_sha256", pa.string()),
        # recognizers, presidio-analyzer, spacy, phonenumbers, ner model (or "off")
        ("detector_versions", pa.map_(pa.string(), pa.string())),
        # distinct values replaced, by entity type
        ("entity_counts", pa.map_(pa.string(), pa.int64())),
        ("replacements", pa.int64()),
        ("fields", pa.list_(pa.string())),
        ("encryption_key_id", pa.string()),
        ("hash_key_id", pa.string()),
        ("flags", pa.list_(pa.string())),
        ("redacted_at", TS),
        ("record_sha256", pa.string()),
    ]
)

# Judge stage (pipelines/judge). agent_events: one row per event of any trace in the
# structured agent-log shape (ids, numbers and flags only; text stays in calls/spans).
AGENT_EVENTS = pa.schema(
    [
        ("ts", TS),
        ("session_id", pa.string()),
        ("trace_id", pa.string()),
        ("step_index", pa.int64()),
        # session.start, llm.call, tool.invoke, agent.think, state.mutate, session.end
        ("event_type", pa.string()),
        ("agent_version", pa.string()),
        ("model", pa.string()),
        ("provider", pa.string()),
        ("tokens_in", pa.int64()),
        ("tokens_out", pa.int64()),
        ("cost_usd", pa.float64()),
        ("latency_ms", pa.float64()),
        ("tool_called", pa.string()),
        ("tool_success", pa.bool_()),
        # the class the source itself logged for the step, if any (findings are in semantic_errors)
        ("semantic_error", pa.string()),
        ("user_tier", pa.string()),
        ("feature_flag", pa.string()),
        ("event_key", pa.string()),
        ("event_id", pa.string()),
        ("parent_event_id", pa.string()),
        ("call_id", pa.string()),
        ("source_format", pa.string()),
        ("service", pa.string()),
        ("status", pa.string()),
        ("finish_reason", pa.string()),
        ("http_status", pa.int64()),
        # the step number the source wrote (null: it wrote none, step_index is the time order)
        ("source_step_index", pa.int64()),
        # session.end: the session's total tokens as the source reported them (checked against its calls)
        ("session_total_tokens", pa.int64()),
        ("occurred_date", pa.date32()),
        ("record_sha256", pa.string()),
    ]
)

# One finding per trace x class x detector x affected step.
SEMANTIC_ERRORS = pa.schema(
    [
        ("finding_id", pa.string()),
        ("trace_id", pa.string()),
        ("session_id", pa.string()),
        ("call_id", pa.string()),
        ("event_key", pa.string()),
        ("occurred_date", pa.date32()),
        ("error_class", pa.string()),
        # false for classes that are not errors (policy_refusal: an expected refusal)
        ("is_error", pa.bool_()),
        ("detector", pa.string()),
        ("detector_version", pa.string()),
        ("confidence", pa.float64()),
        ("evidence", TEXT),
        ("affected_step", pa.int64()),
        ("cause_step", pa.int64()),
        # probability the trace was judged with (1.0 for heuristics): weigh findings by 1/p
        ("judged_with_probability", pa.float64()),
        ("judge_prompt_sha256", pa.string()),
        ("request_key", pa.string()),
        ("simulated", pa.bool_()),
        ("record_sha256", pa.string()),
    ]
)

STATE_VIOLATIONS = pa.schema(
    [
        ("violation_id", pa.string()),
        ("trace_id", pa.string()),
        ("session_id", pa.string()),
        ("event_key", pa.string()),
        ("occurred_date", pa.date32()),
        ("code", pa.string()),
        ("step_index", pa.int64()),
        ("detail", pa.string()),
        ("first_in_trace", pa.bool_()),
        ("validator_version", pa.string()),
        ("record_sha256", pa.string()),
    ]
)

JUDGE_CALIBRATION = pa.schema(
    [
        ("occurred_date", pa.date32()),
        ("judge", pa.string()),
        ("prompt_version", pa.string()),
        ("prompt_sha256", pa.string()),
        # self_agreement | human_feedback
        ("check", pa.string()),
        ("items", pa.int64()),
        ("agreements", pa.int64()),
        ("agreement_rate", pa.float64()),
        ("kappa", pa.float64()),
        ("judged", pa.int64()),
        ("judge_errors", pa.int64()),
        ("simulated", pa.bool_()),
        ("computed_at", TS),
        ("record_sha256", pa.string()),
    ]
)
JUDGE_TABLES = {
    "agent_events": (AGENT_EVENTS, ("event_key",), ("occurred_date",)),
    "semantic_errors": (SEMANTIC_ERRORS, ("finding_id",), ("occurred_date",)),
    "state_violations": (STATE_VIOLATIONS, ("violation_id",), ("occurred_date",)),
    "judge_calibration": (JUDGE_CALIBRATION, ("occurred_date", "prompt_sha256", "check"), ("occurred_date",)),
}
# LLM ledger (pipelines/llm/ledger.py). One row per request the LLM resource sent,
# keyed by the request's content address; what the provider returned, or the
# terminal error. Never the request's content: its hash.
LLM_REQUESTS = pa.schema(
    [
        # sha256(request_sha256|mode|sample_index): the content address
        ("request_key", pa.string()),
        ("request_sha256", pa.string()),
        # replay | judge | ablation | debug
        ("purpose", pa.string()),
        ("mode", pa.string()),
        ("sample_index", pa.int64()),
        ("candidate", pa.string()),
        ("call_id", pa.string()),
        ("model", pa.string()),
        # simulator | api | bedrock | vertex
        ("backend", pa.string()),
        ("batch_id", pa.string()),
        ("custom_id", pa.string()),
        # HTTP attempts (direct) or batch submissions (batch) it took
        ("attempts", pa.int64()),
        # succeeded | errored | expired | canceled (terminal)
        ("status", pa.string()),
        # error type and the provider's message; never request content
        ("error", TEXT),
        ("stop_reason", pa.string()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("cache_read_input_tokens", pa.int64()),
        ("cache_write_input_tokens", pa.int64()),
        ("cost_usd", pa.float64()),
        ("latency_ms", pa.float64()),
        # produced by tracelake's simulator, not a model
        ("simulated", pa.bool_()),
        # {"temperature": {"value": 0.3, "accepted": true}, ...} for the sampling params asked for
        ("sampling_json", JSON),
        ("response_json", JSON),
        ("sent_at", TS),
        ("sent_date", pa.date32()),
        ("run_id", pa.string()),
        # a request sent again (it had run out of retries) replaces its row
        ("record_sha256", pa.string()),
        # the anthropic-version header it was sent under
        ("api_version", pa.string()),
        # sha256 of the body as sent (refused parameters removed, cache marks added); request_sha256 is the one asked
        ("sent_request_sha256", pa.string()),
        # {"temperature": "api_2026_10_21_refuses_sampling", ...}: what was removed before sending, and why
        ("dropped_json", JSON),
        # the retired model the request was recorded on, when a replay sent it on its substitute
        ("substituted_from", pa.string()),
        # how many runs sent it (a failed request is sent again by later runs, up to the resource's retry_runs)
        ("runs", pa.int64()),
        # every attempt of every run: [{"run_id", "at", "via" (batch id or "direct"), "status", "error"}]
        ("attempts_json", JSON),
    ]
)

# One row per Message Batch submitted; written before the first poll, so a run
# killed while polling finds and resumes it.
LLM_BATCHES = pa.schema(
    [
        ("batch_id", pa.string()),
        # in_progress | canceling | ended (the API's processing_status) | not_found (gone when resumed)
        # | results_expired (ended, results past the 29-day download window) | creating / created / not_created
        # (a write-ahead row written before batches.create: batch_id "submit_<uuid>")
        ("state", pa.string()),
        ("request_count", pa.int64()),
        ("succeeded", pa.int64()),
        ("errored", pa.int64()),
        ("expired", pa.int64()),
        ("canceled", pa.int64()),
        # the request keys (= custom_ids) it holds, a JSON list
        ("request_keys_json", JSON),
        ("backend", pa.string()),
        ("simulated", pa.bool_()),
        ("created_at", TS),
        ("ended_at", TS),
        ("sent_date", pa.date32()),
        ("run_id", pa.string()),
        ("record_sha256", pa.string()),
        # a provider batch: the write-ahead row it was created under; a write-ahead row (state creating,
        # created, not_created): the provider batch it became
        ("linked_batch_id", pa.string()),
        # bytes of the batch's create request (the API takes up to 256 MB)
        ("request_bytes", pa.int64()),
        # the most its requests can cost: what a run's budget counts while the batch is open
        ("estimated_usd", pa.float64()),
        # found at the provider by its custom_ids after the run that created it died before recording it
        ("adopted", pa.bool_()),
    ]
)

# One row per replay: call x candidate x mode x sample (a state replay: x step).
# "old" is what the new answer is compared with: the recorded answer, or for a
# diff replay the baseline replay of the recorded request sent beside it.
REPLAYS = pa.schema(
    [
        ("replay_id", pa.string()),
        ("candidate", pa.string()),
        ("candidate_revision", pa.int64()),
        ("day", pa.date32()),
        ("call_id", pa.string()),
        ("trace_id", pa.string()),
        ("session_id", pa.string()),
        ("service", pa.string()),
        # capture | pinned | class_rate | diff | state
        ("mode", pa.string()),
        ("sample_index", pa.int64()),
        ("step", pa.int64()),
        # exact | approximate | ineligible, and why (rotted components, redaction, missing capture items)
        ("fidelity", pa.string()),
        ("fidelity_reasons", pa.list_(pa.string())),
        ("segment", pa.map_(pa.string(), pa.string())),
        ("segment_key", pa.string()),
        ("language", pa.string()),
        ("inclusion_probability", pa.float64()),
        ("recorded_request_sha256", pa.string()),
        ("request_sha256", pa.string()),
        ("request_key", pa.string()),
        ("baseline_request_key", pa.string()),
        # recorded | baseline | recorded_baseline (the recorded answer, compared with a replay on a substitute model)
        ("old_source", pa.string()),
        ("old_output", TEXT),
        ("new_output", TEXT),
        ("old_finish_reason", pa.string()),
        ("new_finish_reason", pa.string()),
        ("old_tool_calls_json", JSON),
        ("new_tool_calls_json", JSON),
        ("old_model", pa.string()),
        ("new_model", pa.string()),
        # capture/pinned: what moved against the recorded call (output_text, finish_reason, tool_calls, response_model)
        ("divergence", pa.list_(pa.string())),
        # the LLM result's status (succeeded, errored, expired, ...) or not_sent
        ("status", pa.string()),
        ("error", TEXT),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("cache_read_input_tokens", pa.int64()),
        ("cache_write_input_tokens", pa.int64()),
        ("cost_usd", pa.float64()),
        # the pairwise judge's requests that compared old and new (diff)
        ("judge_cost_usd", pa.float64()),
        # improved | regressed | same | inconclusive, and the signal or judge that decided it
        ("verdict", pa.string()),
        ("decided_by", pa.string()),
        # class_rate: this sample reproduced the failure; the call's share with its Wilson 95% interval
        ("reproduced", pa.bool_()),
        ("class_rate", pa.float64()),
        ("class_rate_low", pa.float64()),
        ("class_rate_high", pa.float64()),
        # state: why the session stopped (finished, step_limit, no_recorded_result:<tool>, error)
        ("stop_reason", pa.string()),
        ("simulated", pa.bool_()),
        ("run_id", pa.string()),
        ("record_sha256", pa.string()),
        # the retired model the call was recorded on; the replay (and a diff's baseline) ran on its substitute
        ("substituted_from", pa.string()),
    ]
)

# candidate x day x mode x fidelity x segment ("all": reweighted by inverse inclusion probability)
REPLAY_SUMMARY = pa.schema(
    [
        ("candidate", pa.string()),
        ("day", pa.date32()),
        ("mode", pa.string()),
        ("fidelity", pa.string()),
        ("segment_key", pa.string()),
        ("service", pa.string()),
        ("language", pa.string()),
        ("user_tier", pa.string()),
        ("length", pa.string()),
        ("n", pa.int64()),
        ("weight", pa.float64()),
        ("effective_n", pa.float64()),
        ("improved", pa.int64()),
        ("regressed", pa.int64()),
        ("same", pa.int64()),
        ("inconclusive", pa.int64()),
        *[(f"{v}_{s}", pa.float64()) for v in ("improved", "regressed", "same") for s in ("share", "low", "high")],
        ("delta", pa.float64()),
        ("delta_low", pa.float64()),
        ("delta_high", pa.float64()),
        ("sign_test_p", pa.float64()),
        ("bh_p", pa.float64()),
        ("significant_regression", pa.bool_()),
        ("significant_improvement", pa.bool_()),
        ("aggregate_improves", pa.bool_()),
        # the aggregate improves while a segment significantly regresses
        ("hides_regression", pa.bool_()),
        ("regressed_segments", pa.list_(pa.string())),
        ("cost_usd", pa.float64()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("simulated", pa.bool_()),
        ("record_sha256", pa.string()),
        # recorded_model | substituted (replayed on a retired model's substitute): never in one group
        ("model_basis", pa.string()),
    ]
)

# Debugging (pipelines/debug): one row per ablation variant of a bad call
# against a good sibling, and one row per reproduced bug promoted to a dataset.
ABLATIONS = pa.schema(
    [
        # sha256 of bad call | good call | variant request hash | samples: a re-run merges onto the same row
        ("ablation_id", pa.string()),
        ("bad_call_id", pa.string()),
        ("good_call_id", pa.string()),
        # bad: the bad request with the difference reversed; good: the good request with the bad call's value
        ("applied_to", pa.string()),
        # 0 for the request as recorded (the baseline), else the difference's number in `tracelake siblings`
        ("difference_index", pa.int64()),
        # the difference as `tracelake siblings` names it: block, ingredient, doc ids or (redacted) variable values
        ("difference", pa.string()),
        ("block", pa.string()),
        # baseline | sibling (the good call's block) | neutral (a passage of the same token length)
        ("replacement", pa.string()),
        ("request_sha256", pa.string()),
        # what counts as a failure: the bad call's own symptom (language_mismatch, truncated, errored, ...)
        ("symptom", pa.string()),
        ("samples", pa.int64()),
        ("failures", pa.int64()),
        ("failure_rate", pa.float64()),
        # Wilson 95% interval of failure_rate
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("model", pa.string()),
        ("temperature", pa.float64()),
        ("cost_usd", pa.float64()),
        ("simulated", pa.bool_()),
        ("run_id", pa.string()),
        ("created_at", TS),
        ("record_sha256", pa.string()),
    ]
)

REGRESSION_CASES = pa.schema(
    [
        # sha256 of dataset | call_id: promoting the same call again updates its note
        ("case_id", pa.string()),
        ("dataset", pa.string()),
        ("call_id", pa.string()),
        ("trace_id", pa.string()),
        ("service", pa.string()),
        ("template_id", pa.string()),
        ("template_version", pa.string()),
        ("occurred_at", TS),
        # the frozen request as it left the application (canonical JSON) and its hash
        ("request_json", JSON),
        ("request_sha256", pa.string()),
        # the bad output as recorded, with its finish reason and the symptom seen in it
        ("bad_output_text", TEXT),
        ("bad_finish_reason", pa.string()),
        ("symptom", pa.string()),
        ("segment", pa.map_(pa.string(), pa.string())),
        ("note", TEXT),
        # where it came from: the source object and line, and who promoted it when
        ("source_uri", pa.string()),
        ("source_line", pa.int64()),
        ("replay_fidelity", pa.string()),
        ("promoted_by", pa.string()),
        ("promoted_at", TS),
        ("record_sha256", pa.string()),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "calls": CALLS,
    "spans": SPANS,
    "traces": TRACES,
    "ingest_log": INGEST_LOG,
    "quarantine": QUARANTINE,
    "retention": RETENTION,
    "retention_coverage": RETENTION_COVERAGE,
    "erasure_log": ERASURE_LOG,
    "rot_checks": ROT_CHECKS,
    "redaction_audit": REDACTION_AUDIT,
    "ablations": ABLATIONS,
    "regression_cases": REGRESSION_CASES,
    "replays": REPLAYS,
    "replay_summary": REPLAY_SUMMARY,
    "llm_requests": LLM_REQUESTS,
    "llm_batches": LLM_BATCHES,
}

# Merge keys and Delta partition columns per table.
KEYS: dict[str, tuple[str, ...]] = {
    "calls": ("call_id",),
    "spans": ("span_key",),
    "traces": ("trace_id",),
    "ingest_log": ("source_key", "etag"),
    "quarantine": ("quarantine_id",),
    "retention": ("call_id",),
    "retention_coverage": ("window_end", "segment_key"),
    "erasure_log": ("erasure_id",),
    "rot_checks": ("call_id", "checked_at"),
    "redaction_audit": ("call_id",),
    "ablations": ("ablation_id",),
    "regression_cases": ("case_id",),
    "replays": ("replay_id",),
    "replay_summary": ("candidate", "day", "mode", "fidelity", "model_basis", "segment_key"),
    "llm_requests": ("request_key",),
    "llm_batches": ("batch_id",),
}
PARTITIONS: dict[str, tuple[str, ...]] = {
    # the hour (UTC) of occurred_at, a column storage adds (record/stored.py): a shard's merge
    # reads only the hours its rows fall in, not the whole day
    "calls": ("occurred_date", "occurred_hour"),
    "spans": ("occurred_date", "occurred_hour"),
    "traces": ("occurred_date",),
    "ingest_log": (),
    "quarantine": ("ingested_date",),
    "retention": ("occurred_date",),
    "retention_coverage": ("window_end",),
    "erasure_log": (),
    "rot_checks": ("checked_date",),
    "redaction_audit": ("occurred_date",),
    "ablations": (),
    "regression_cases": (),
    "replays": ("candidate", "day"),
    "replay_summary": ("candidate", "day"),
    "llm_requests": ("sent_date",),
    "llm_batches": ("sent_date",),
}

# the judge stage's tables (declared above, in one block)
TABLES.update({name: schema for name, (schema, _, _) in JUDGE_TABLES.items()})
KEYS.update({name: keys for name, (_, keys, _) in JUDGE_TABLES.items()})
PARTITIONS.update({name: parts for name, (_, _, parts) in JUDGE_TABLES.items()})
