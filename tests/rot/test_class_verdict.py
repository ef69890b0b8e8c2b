"""Whether a class's stored request reproduces is read from its canonical bytes around the
call's own part (``class_verdict.reproduces``): it must say what comparing the recorded
blocks' canonical JSON with today's says, on requests whose blocks moved, gained or lost a
key, or hold a key that sorts between the call's own keys."""

from __future__ import annotations

import pytest

from pipelines.record.canonical import canonical_json
from pipelines.rot.class_verdict import OWN_KEYS, around, reproduces

RECORDED = {
    "max_tokens": 1024,
    "messages": [{"content": 'a "quoted" ,"model":"x"} message', "role": "user"}],
    "metadata": {"user_id": "u-1"},
    "model": "claude-sonnet-4-5-20250929",
    "system": 'You answer from documents.\n"kb-1": ,"temperature":0.2}',
    "temperature": 0.2,
    "tools": [{"name": "lookup", "input_schema": {"type": "object"}}],
}


def _pieces(request: dict) -> dict[str, str]:
    return {k: canonical_json(v) for k, v in request.items() if k not in OWN_KEYS}


def _says(recorded: dict, today: dict) -> tuple[bool, bool]:
    """(the byte check, the block-by-block comparison) for a stored ``recorded`` request."""
    text = canonical_json(recorded)
    keys = {k for k in recorded if k not in OWN_KEYS}
    return reproduces(text, recorded, keys, _pieces(today)), _pieces(recorded) == _pieces(today)


@pytest.mark.parametrize(
    "today",
    [
        RECORDED,
        {**RECORDED, "model": "claude-sonnet-4-6-20261015"},
        {**RECORDED, "system": RECORDED["system"] + " "},
        {**RECORDED, "temperature": 0.3},
        {**RECORDED, "max_tokens": 10240},
        {**RECORDED, "max_tokens": 102},
        {**RECORDED, "tools": [{"name": "lookup", "input_schema": {"type": "object", "x": 1}}]},
        {k: v for k, v in RECORDED.items() if k != "tools"},
        {**RECORDED, "top_p": 0.9},
        {**RECORDED, "aaa": 1},
        {**RECORDED, "meta": "between the own keys"},
    ],
    ids=[
        "same",
        "model",
        "system",
        "temperature",
        "longer-number",
        "shorter-number",
        "tools",
        "no-tools",
        "extra-key-after",
        "extra-key-before",
        "key-between-own-keys",
    ],
)
def test_the_byte_check_says_what_the_block_comparison_says(today):
    by_bytes, by_blocks = _says(RECORDED, today)
    assert by_bytes == by_blocks


def test_a_recorded_key_between_the_own_keys_is_compared_by_value():
    recorded = {**RECORDED, "meta": "v"}
    assert _says(recorded, recorded) == (True, True)
    assert _says(recorded, {**recorded, "meta": "w"}) == (False, False)


def test_the_bytes_around_the_own_part_are_the_canonical_request_s():
    text = canonical_json(RECORDED)
    head, tail = around(_pieces(RECORDED))
    own = canonical_json(RECORDED["messages"]) + ',"metadata":' + canonical_json(RECORDED["metadata"])
    assert head + own + tail == text
