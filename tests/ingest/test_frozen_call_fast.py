"""The msgspec validation fast path of frozen-call v1 gives pydantic's result:
the same rows where it takes a document, and it leaves to pydantic (returns
None) every document pydantic would coerce, read differently or refuse."""

from __future__ import annotations

import copy
from datetime import UTC, date, datetime

import msgspec
import pydantic
import pytest

from pipelines.demo import day_objects
from pipelines.demo.people import population
from pipelines.formats import frozen_call
from pipelines.formats import frozen_call_structs as structs
from pipelines.formats.base import json_records
from pipelines.record.rows import RecordError
from tests.ingest.test_frozen_call import DOC, SOURCE

PAIRS = [
    (frozen_call.FrozenCallV1, structs.FrozenCall),
    (frozen_call.PromptRef, structs.PromptRef),
    (frozen_call.ModelRef, structs.ModelRef),
    (frozen_call.Sampling, structs.Sampling),
    (frozen_call.Retrieval, structs.Retrieval),
    (frozen_call.Usage, structs.Usage),
    (frozen_call.Feedback, structs.Feedback),
    (frozen_call.Error, structs.Error),
    (frozen_call.ToolExecution, structs.ToolExecution),
    (frozen_call.Response, structs.Response),
]


def _defaults(struct: type[msgspec.Struct]) -> dict:
    out = {}
    for field in msgspec.structs.fields(struct):
        if field.default is not msgspec.NODEFAULT:
            out[field.name] = field.default
        elif field.default_factory is not msgspec.NODEFAULT:
            out[field.name] = field.default_factory()
    return out


@pytest.mark.parametrize(("model", "struct"), PAIRS, ids=[m.__name__ for m, _ in PAIRS])
def test_the_structs_have_the_models_fields_and_defaults(model, struct):
    names = set(struct.__struct_fields__) - {"model_extra"}
    assert names == set(model.model_fields)
    defaults = _defaults(struct)
    for name, info in model.model_fields.items():
        if info.is_required():
            assert name not in defaults, name
        else:
            assert defaults[name] == info.get_default(call_default_factory=True), name
    forbids = model.model_config.get("extra") == "forbid"
    assert struct.__struct_config__.forbid_unknown_fields == forbids


def _row(doc):
    return frozen_call.to_call(doc, SOURCE, 1)


def _pydantic_row(value):
    return _row(frozen_call.FrozenCallV1.model_validate(value))


def test_the_fast_path_takes_the_demo_documents_and_gives_pydantics_rows():
    objects, _, _ = day_objects(date(2026, 11, 29), 30, 7, population(7))
    documents = [
        item.value
        for key, data in objects.items()
        if "/agent/" not in key
        for item in json_records(data, lines=".jsonl" in key)
    ]
    assert len(documents) >= 10
    for value in documents:
        doc = structs.fast_validate(value)
        assert isinstance(doc, structs.FrozenCall)
        assert _row(doc) == _pydantic_row(value)


def test_a_full_document_gives_the_same_row_both_ways():
    doc = structs.fast_validate(DOC)
    assert doc is not None and doc.model_extra == {"app_build": "2026.11.3"}
    row = _row(doc)
    assert row == _pydantic_row(DOC)
    assert row["extra_json"] and row["occurred_at"] == datetime(2026, 11, 29, 14, 32, 1, tzinfo=UTC)


def _with(path: str, value):
    doc = copy.deepcopy(DOC)
    *parents, last = path.split(".")
    target = doc
    for part in parents:
        target = target[part]
    target[last] = value
    return doc


# What pydantic coerces, reads otherwise or refuses: the fast path leaves each to pydantic.
LEFT_TO_PYDANTIC = {
    "a numeric string for an int": ("sampling.max_tokens", "1024"),
    "a float for an int": ("sampling.top_k", 5.0),
    "a bool for a float": ("latency_ms", True),
    "an int for a bool": ("escalated", 1),
    "seven fraction digits": ("occurred_at", "2026-11-29T14:32:01.1234567Z"),
    "a date without a time": ("occurred_at", "2026-11-29"),
    "unix seconds": ("ended_at", 1796000000),
    "a space for the T": ("ended_at", "2026-11-29 14:32:03Z"),
    "a time before 1990": ("occurred_at", "1970-01-01T00:00:00Z"),
    "a feedback time as a number": ("feedback.at", 0),
    "an unknown nested key": ("model.revision", "2"),
    "a hash with a newline after it": ("rendered_request_sha256", "a" * 64 + "\n"),
    "an empty trace id": ("trace_id", ""),
    "scores not aligned with doc_ids": ("retrieval.scores", [0.9]),
    "a wrong format tag": ("format", "tracelake.other"),
    "a null where a default stands": ("escalated", None),
}


@pytest.mark.parametrize("case", sorted(LEFT_TO_PYDANTIC))
def test_the_fast_path_leaves_coercions_and_errors_to_pydantic(case):
    value = _with(*LEFT_TO_PYDANTIC[case])
    assert structs.fast_validate(value) is None
    try:
        expected = _pydantic_row(value)
    except pydantic.ValidationError:
        with pytest.raises(RecordError) as error:
            frozen_call.validate(value)
        assert error.value.message.startswith("not a frozen-call v1 document: ")
    else:
        assert _row(frozen_call.validate(value)) == expected


def test_time_forms_both_read_alike_are_taken():
    for text in ("2026-11-29T14:32:01Z", "2026-11-29T14:32:01.5+05:30", "2026-11-29T14:32:01.123456"):
        value = _with("occurred_at", text)
        doc = structs.fast_validate(value)
        assert doc is not None, text
        assert _row(doc) == _pydantic_row(value)
