"""`tracelake promote CALL_ID --dataset NAME --note TEXT`: keep a reproduced bug
as a regression case, frozen: the request as it left the application, the bad
output, the note, and where it came from.

A dataset of cases is a set of calls a replay candidate can be run against:
``dataset_calls`` gives them back as `calls` rows whose request is the frozen
one kept in the case (so a later retention sweep of the call cannot change
what the case replays).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import polars as pl

from pipelines.debug.symptoms import symptom_of
from pipelines.debug.tables import Tables
from pipelines.record.canonical import record_sha256, sha256_hex

DATASET_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")


def check_dataset_name(name: str) -> str:
    if not DATASET_NAME.fullmatch(name):
        raise ValueError(
            f"dataset name {name!r} should be 1-63 lowercase letters, digits, '.', '_' or '-', starting with a "
            "letter or digit"
        )
    return name


def case_row(
    call: Mapping[str, Any],
    dataset: str,
    note: str,
    *,
    replay_fidelity: str | None,
    promoted_by: str,
    now: datetime,
) -> dict[str, Any]:
    if not call.get("request_json"):
        raise ValueError(
            f"call {call['call_id']} has no frozen request (capture_missing: "
            f"{', '.join(call.get('capture_missing') or []) or 'request_json'}); a regression case needs one"
        )
    row = {
        "case_id": sha256_hex(f"{check_dataset_name(dataset)}|{call['call_id']}"),
        "dataset": dataset,
        "call_id": call["call_id"],
        "trace_id": call.get("trace_id"),
        "service": call.get("service"),
        "template_id": call.get("template_id"),
        "template_version": call.get("template_version"),
        "occurred_at": call.get("occurred_at"),
        "request_json": call["request_json"],
        "request_sha256": call.get("request_sha256"),
        "bad_output_text": call.get("output_text"),
        "bad_finish_reason": call.get("finish_reason"),
        "symptom": symptom_of(call),
        "segment": dict(call.get("segment") or {}),
        "note": note,
        "source_uri": call.get("source_uri"),
        "source_line": call.get("source_line"),
        "replay_fidelity": replay_fidelity,
    }
    row["record_sha256"] = record_sha256(row, ())
    row["promoted_by"] = promoted_by
    row["promoted_at"] = now
    return row


def dataset_calls(warehouse: Tables, dataset: str) -> pl.DataFrame:
    """The `calls` rows of a dataset's cases, with the request frozen in the case."""
    cases = (
        warehouse.scan("regression_cases")
        .filter(pl.col("dataset") == dataset)
        .select("call_id", pl.col("request_json").alias("_frozen"))
        .collect()
    )
    if cases.is_empty():
        return cases
    calls = warehouse.scan("calls").filter(pl.col("call_id").is_in(cases["call_id"].implode())).collect()
    return (
        calls.join(cases, on="call_id", how="inner")
        .with_columns(pl.col("_frozen").alias("request_json"))
        .drop("_frozen")
    )
