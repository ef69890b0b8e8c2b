"""The hashing spec (docs/architecture.md): canonical request bytes, request hash, per-block hashes, ids."""

import hashlib
import json

from pipelines.record import canonical

REQUEST = {
    "model": "claude-sonnet-4-5-20250929",
    "system": "Você é o assistente.",
    "messages": [
        {"role": "user", "content": "Olá"},
        {"role": "assistant", "content": [{"type": "text", "text": "Oi!", "citations": None}]},
    ],
    "max_tokens": 512,
    "temperature": None,
    "tools": [{"name": "lookup", "input_schema": {"type": "object"}}],
    "metadata": {"user_id": "u-1"},
}


def test_canonical_json_sorts_keys_drops_none_keeps_unicode():
    text = canonical.canonical_json(REQUEST)
    assert text.startswith('{"max_tokens":512,"messages":[')
    assert "temperature" not in text and "citations" not in text
    assert "Você" in text and "\\u" not in text
    assert ", " not in text and ": " not in text


ASSISTANT_WITHOUT_NONE = {"role": "assistant", "content": [{"type": "text", "text": "Oi!"}]}


def test_request_hash_is_sha256_of_the_canonical_bytes():
    expected = hashlib.sha256(
        json.dumps(
            {k: v for k, v in REQUEST.items() if v is not None}
            | {"messages": [REQUEST["messages"][0], ASSISTANT_WITHOUT_NONE]},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode("utf-8")
    ).hexdigest()
    assert canonical.request_sha256(REQUEST) == expected
    # key order in the source does not matter; a value does
    assert canonical.request_sha256(dict(reversed(list(REQUEST.items())))) == expected
    assert canonical.request_sha256({**REQUEST, "max_tokens": 513}) != expected


def test_none_inside_lists_is_kept():
    assert canonical.canonical_json({"a": [None, 1]}) == '{"a":[null,1]}'


def test_block_hashes_name_each_block_and_move_only_with_it():
    docs = [("kb-1", "Refunds take 5 days."), ("kb-2", None)]
    blocks = {b["block"]: b["sha256"] for b in canonical.block_hashes(REQUEST, docs, {"system": 7})}
    assert set(blocks) == {
        "model",
        "system",
        "messages[0]",
        "messages[1]",
        "tools",
        "params",
        "metadata",
        "document:kb-1",
    }
    changed = {**REQUEST, "system": "Você é outro assistente."}
    moved = {b["block"]: b["sha256"] for b in canonical.block_hashes(changed, docs)}
    assert [name for name in blocks if blocks[name] != moved[name]] == ["system"]
    assert blocks["system"] == canonical.sha256_hex(canonical.canonical_json(REQUEST["system"]))
    tokens = {b["block"]: b["tokens"] for b in canonical.block_hashes(REQUEST, docs, {"system": 7})}
    assert tokens["system"] == 7 and tokens["tools"] is None


def test_call_id_is_stable_and_distinguishes_sources():
    a = canonical.call_id("frozen_call", "t1", "s1")
    assert a == canonical.call_id("frozen_call", "t1", "s1")
    assert a != canonical.call_id("agent_events", "t1", "s1")
    assert len(a) == 64


def test_blocks_of_a_plain_request_are_the_spec_bytes_also_past_64_bit_ints_and_many_messages():
    # the plain path dumps every block with orjson at once; an int orjson refuses sends them the spec's way
    many = [{"role": "user", "content": f"turn {i}"} for i in range(300)]
    for request in (
        canonical.drop_none(REQUEST),
        {**canonical.drop_none(REQUEST), "max_tokens": 2**70},
        {"model": "m", "messages": many},
    ):
        plain = canonical.canonical_blocks(request, [("kb-1", "x")], plain=True)
        assert plain == canonical.canonical_blocks(request, [("kb-1", "x")])
        assert plain["model"] == canonical.spec_dumps(request["model"]).encode()
    assert list(plain)[-2] == "messages[299]"
    assert json.loads(plain["messages[299]"]) == many[299]
    # rows with and without tokens per block name the same digests
    with_tokens = canonical.block_hashes(REQUEST, [], {"messages[0]": 3})
    without = canonical.block_hashes(REQUEST, [])
    assert [r["sha256"] for r in with_tokens] == [r["sha256"] for r in without]
    assert [r["tokens"] for r in with_tokens if r["tokens"] is not None] == [3]
