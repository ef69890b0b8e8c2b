"""Data-quality suites for the ingest tables, run with Great Expectations.

Each suite validates the identity, hash, time and count columns of one day of
a table. Text columns never go to Great Expectations, and results carry
counts, not values: a failed expectation says which rule and how many rows,
never what the rows held.

A few rules span columns or tables (token totals, "every llm.call event has a
call row"); they are computed as a boolean column first and then validated
like any other column, so every rule shows up in one report.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

import polars as pl

HASH = r"^[0-9a-f]{64}$"
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class RuleResult:
    rule: str
    column: str
    passed: bool
    unexpected: int


@dataclass
class QualityReport:
    table: str
    rows: int
    results: list[RuleResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[RuleResult]:
        return [r for r in self.results if not r.passed]

    def markdown(self) -> str:
        lines = ["| rule | column | passed | unexpected rows |", "|---|---|---|---|"]
        lines += [
            f"| {r.rule} | {r.column} | {'yes' if r.passed else '**no**'} | {r.unexpected} |" for r in self.results
        ]
        return "\n".join(lines)


def _token_total_consistent() -> pl.Expr:
    usage = pl.col("usage")
    parts = [usage.struct.field(f).fill_null(0) for f in ("input_tokens", "output_tokens")]
    cache = [usage.struct.field(f).fill_null(0) for f in ("cache_read_input_tokens", "cache_write_input_tokens")]
    total = usage.struct.field("total_tokens")
    # sources differ on whether input_tokens already includes cache tokens: accept either sum
    return (
        total.is_null() | (total == pl.sum_horizontal(parts + cache)) | (total == pl.sum_horizontal(parts))
    ).fill_null(True)


# The columns a table's suite reads, where reading the table whole would cost much more
# (a day of `calls` with its text: 0.41 s against 0.09 on the 40k-call day).
READ_COLUMNS: dict[str, list[str]] = {
    "calls": [
        "call_id", "trace_id", "span_id", "request_sha256", "rendered_request_sha256",
        "occurred_at", "occurred_date", "usage",
    ],
}  # fmt: skip


def _calls_frame(frame: pl.DataFrame, _: dict[str, pl.DataFrame]) -> pl.DataFrame:
    return frame.select(
        "call_id",
        "trace_id",
        "span_id",
        "request_sha256",
        "rendered_request_sha256",
        "occurred_at",
        _token_total_consistent().alias("token_total_consistent"),
        (pl.col("occurred_date") == pl.col("occurred_at").dt.date()).alias("date_matches_time"),
    )


def _spans_frame(frame: pl.DataFrame, others: dict[str, pl.DataFrame]) -> pl.DataFrame:
    call_ids = others.get("calls", pl.DataFrame({"call_id": []}, schema={"call_id": pl.String}))["call_id"]
    is_llm = pl.col("kind") == "llm_call"
    return frame.select(
        "span_key",
        "trace_id",
        "kind",
        "occurred_at",
        (~is_llm | pl.col("call_id").is_in(call_ids.implode())).alias("llm_call_has_call_row"),
    )


def _traces_frame(frame: pl.DataFrame, _: dict[str, pl.DataFrame]) -> pl.DataFrame:
    return frame.select(
        "trace_id",
        "started_at",
        "ended_at",
        (pl.col("call_count") <= pl.col("span_count")).alias("calls_within_spans"),
    )


def _ingest_log_frame(frame: pl.DataFrame, _: dict[str, pl.DataFrame]) -> pl.DataFrame:
    accounted = pl.col("records_ingested") + pl.col("records_quarantined")
    return frame.select("source_key", "etag", "status", "records_read", accounted.alias("records_accounted"))


def _quarantine_frame(frame: pl.DataFrame, _: dict[str, pl.DataFrame]) -> pl.DataFrame:
    return frame.select("quarantine_id", "source_key", "error_class", "message", "line")


def _agent_events_frame(frame: pl.DataFrame, others: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """The judge stage's rules on the agent log itself: llm.call events have call rows, tool
    events say whether they succeeded, and a session.end's reported tokens match its calls."""
    call_ids = others.get("calls", pl.DataFrame({"call_id": []}, schema={"call_id": pl.String}))["call_id"]
    kind = pl.col("event_type")
    call_tokens = (
        frame.filter(kind == "llm.call")
        .group_by("trace_id")
        .agg((pl.col("tokens_in").fill_null(0) + pl.col("tokens_out").fill_null(0)).sum().alias("calls_total"))
    )
    return frame.join(call_tokens, on="trace_id", how="left").select(
        "event_key",
        "event_type",
        ((kind != "llm.call") | pl.col("call_id").is_in(call_ids.implode()).fill_null(False)).alias(
            "llm_call_has_call_row"
        ),
        ((kind != "tool.invoke") | pl.col("tool_success").is_not_null()).alias("tool_success_set"),
        (
            (kind != "session.end")
            | pl.col("session_total_tokens").is_null()
            | (pl.col("session_total_tokens") == pl.col("calls_total").fill_null(0))
        ).alias("session_tokens_match_calls"),
    )


def _expectations(table: str, now: datetime) -> list[Any]:
    import great_expectations as gx

    e = gx.expectations
    latest = now + timedelta(days=1)
    in_time = {"min_value": EARLIEST, "max_value": latest}
    suites: dict[str, list[Any]] = {
        "calls": [
            e.ExpectColumnValuesToNotBeNull(column="call_id"),
            e.ExpectColumnValuesToBeUnique(column="call_id"),
            e.ExpectColumnValuesToNotBeNull(column="trace_id"),
            e.ExpectColumnValuesToNotBeNull(column="span_id"),
            e.ExpectColumnValuesToMatchRegex(column="request_sha256", regex=HASH),
            e.ExpectColumnValuesToMatchRegex(column="rendered_request_sha256", regex=HASH),
            e.ExpectColumnValuesToBeBetween(column="occurred_at", **in_time),
            e.ExpectColumnValuesToBeInSet(column="token_total_consistent", value_set=[True]),
            e.ExpectColumnValuesToBeInSet(column="date_matches_time", value_set=[True]),
        ],
        "spans": [
            e.ExpectColumnValuesToNotBeNull(column="span_key"),
            e.ExpectColumnValuesToBeUnique(column="span_key"),
            e.ExpectColumnValuesToNotBeNull(column="trace_id"),
            e.ExpectColumnValuesToBeInSet(
                column="kind",
                value_set=[
                    "llm_call",
                    "tool",
                    "retrieval",
                    "think",
                    "state",
                    "session_start",
                    "session_end",
                    "check",
                    "evaluation",
                    "agent",
                    "chain",
                    "other",
                ],
            ),
            e.ExpectColumnValuesToBeBetween(column="occurred_at", **in_time),
            e.ExpectColumnValuesToBeInSet(column="llm_call_has_call_row", value_set=[True]),
        ],
        "traces": [
            e.ExpectColumnValuesToNotBeNull(column="trace_id"),
            e.ExpectColumnValuesToBeUnique(column="trace_id"),
            e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="ended_at", column_B="started_at", or_equal=True),
            e.ExpectColumnValuesToBeInSet(column="calls_within_spans", value_set=[True]),
        ],
        "ingest_log": [
            e.ExpectCompoundColumnsToBeUnique(column_list=["source_key", "etag"]),
            e.ExpectColumnPairValuesToBeEqual(column_A="records_read", column_B="records_accounted"),
            e.ExpectColumnValuesToBeInSet(column="status", value_set=["ok", "partial", "failed"]),
        ],
        "agent_events": [
            e.ExpectColumnValuesToBeUnique(column="event_key"),
            e.ExpectColumnValuesToBeInSet(column="llm_call_has_call_row", value_set=[True]),
            e.ExpectColumnValuesToBeInSet(column="tool_success_set", value_set=[True]),
            e.ExpectColumnValuesToBeInSet(column="session_tokens_match_calls", value_set=[True]),
        ],
        "quarantine": [
            e.ExpectColumnValuesToBeUnique(column="quarantine_id"),
            e.ExpectColumnValuesToNotBeNull(column="error_class"),
            e.ExpectColumnValuesToNotBeNull(column="message"),
            e.ExpectColumnValuesToBeBetween(column="line", min_value=1),
        ],
    }
    return suites[table]


FRAMES: dict[str, Callable[[pl.DataFrame, dict[str, pl.DataFrame]], pl.DataFrame]] = {
    "calls": _calls_frame,
    "spans": _spans_frame,
    "traces": _traces_frame,
    "ingest_log": _ingest_log_frame,
    "quarantine": _quarantine_frame,
    "agent_events": _agent_events_frame,
}


_GX_LOCK = threading.Lock()


def gx_source():
    """One ephemeral Great Expectations context and pandas data source per
    process, for every suite (this module's and the residual-PII scan)."""
    with _GX_LOCK:  # built once, also when prepare_in_background is still building it
        return _gx_source()


def prepare_in_background() -> threading.Thread:
    """Build ``gx_source`` in a thread (importing Great Expectations and making its
    context take ~2 CPU-s): for a caller about to wait on other processes, such as
    the ingest stage while its redaction workers run NER, so that its checks do not pay it later."""
    thread = threading.Thread(target=gx_source, name="tracelake-gx-context", daemon=True)
    thread.start()
    return thread


@lru_cache(maxsize=1)
def _gx_source():
    # Great Expectations takes seconds to import: only pay for it when validating
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context.data_sources.add_pandas(name="tracelake")


def _rule_name(expectation: Any) -> str:
    return type(expectation).__name__.removeprefix("Expect")


@contextmanager
def gx_batch(name: str, frame: pl.DataFrame) -> Iterator[Any]:
    """``frame`` as a Great Expectations batch of the shared source, under a dataframe
    asset ``name`` that is removed again afterwards."""
    source = gx_source()
    batch = (
        source.add_dataframe_asset(name=name)
        .add_batch_definition_whole_dataframe("all")
        .get_batch(batch_parameters={"dataframe": frame.to_pandas()})
    )
    try:
        yield batch
    finally:
        source.delete_asset(name)


def same_rule(validated: Any, expected: Any) -> bool:
    """The result's rule is the expectation's (the validator adds the batch id to the kwargs)."""
    kwargs = {k: v for k, v in validated.kwargs.items() if k != "batch_id"}
    return validated.type == expected.type and kwargs == expected.kwargs


def validate(
    table: str, frame: pl.DataFrame, others: dict[str, pl.DataFrame] | None = None, now: datetime | None = None
) -> QualityReport:
    """Validate one table's rows (usually one day) with its suite.

    The suite is validated whole, in one call: Great Expectations fingerprints the
    batch's dataframe (a hash of every value) for each validator it makes, and one
    expectation at a time made one validator per rule (the 40k-call day's `calls`
    suite: 0.62 s against 0.20, most of it hashing the same frame nine times)."""
    import great_expectations as gx

    checked = FRAMES[table](frame, others or {})
    report = QualityReport(table=table, rows=checked.height)
    if checked.is_empty():
        return report
    name = f"{table}-{id(checked)}"
    with gx_batch(name, checked) as batch:
        suite = gx.ExpectationSuite(name=name, expectations=_expectations(table, now or datetime.now(UTC)))
        results = batch.validate(suite, result_format="BASIC").results
        for expectation, result in zip(suite.expectations, results, strict=True):
            if not same_rule(result.expectation_config, expectation.configuration):
                raise RuntimeError(f"{table}: Great Expectations returned the suite's results out of order")
            kwargs = expectation.configuration.kwargs
            named = [kwargs[k] for k in ("column", "column_A", "column_B", "column_list") if k in kwargs]
            column = ",".join(",".join(n) if isinstance(n, list) else str(n) for n in named)
            unexpected = int((result.result or {}).get("unexpected_count") or 0)
            report.results.append(RuleResult(_rule_name(expectation), column, bool(result.success), unexpected))
    return report
