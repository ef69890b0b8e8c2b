"""Outputs pinned on the demo corpus: a faster ingest, redaction, rot check or
storage layout must not change what tracelake concludes about a call.

For one demo day (the same one the rot tests use), every call's identity
(``call_id``), record hash (``record_sha256``), recorded and computed request
hashes, rot verdict with its components, redaction entity counts and a digest
of its redacted content are compared with ``demo_day_outputs.json``, which was
written by the code before the performance work (issue 13).

If a change is *meant* to alter one of these, regenerate the file with
``TRACELAKE_DEMO=1 TRACELAKE_START_DATE=2024-01-01 python -m
tests.pinned.test_demo_outputs`` and say why in the commit. Every value is compared
as the table stores it (the table written is the table read).
"""

from __future__ import annotations

import hashlib
import json
from datetime import date
from pathlib import Path

import dagster as dg

from assets.rot import rot_checks, rot_rate_jump
from pipelines.demo import generate
from tests.environments import local_settings, run_stage

DAY = date(2026, 11, 20)
GOLDEN = Path(__file__).with_name("demo_day_outputs.json")

# Columns holding text a person or a model wrote (so, after redaction, the
# replacements); JSON-text columns are parsed, so byte formatting does not count.
CONTENT = (
    "user_id",
    "session_id",
    "system_text",
    "messages",
    "template_variables_json",
    "retrieval",
    "tool_executions",
    "output_text",
    "output_messages",
    "error_message",
    "request_json",
)
JSON_TEXT = {"template_variables_json", "request_json"}


def _content_digest(call: dict) -> str:
    values = {c: (json.loads(call[c]) if c in JSON_TEXT and call[c] else call[c]) for c in CONTENT}
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


def outputs(tmp_path: Path, instance: dg.DagsterInstance) -> dict[str, dict]:
    """call_id -> what tracelake concluded about it, for the pinned demo day."""
    settings = local_settings(tmp_path)
    generate(settings.source_uri, calls=260, days=1, seed=11, end=DAY, stores_out=settings.stores_uri)
    assert run_stage(settings, "ingest", DAY.isoformat(), instance).success
    result = dg.materialize(
        [rot_checks, rot_rate_jump], resources=settings.resources(), partition_key=DAY.isoformat(), instance=instance
    )
    assert result.success
    warehouse = settings.warehouse()
    rot = {r["call_id"]: r for r in warehouse.read("rot_checks").to_dicts()}
    audit = {r["call_id"]: r for r in warehouse.read("redaction_audit").to_dicts()}
    pinned = {}
    for call in warehouse.read("calls").to_dicts():
        check = rot.get(call["call_id"], {})
        entities = (audit.get(call["call_id"]) or {}).get("entity_counts") or {}
        if isinstance(entities, list):  # a map column read as key/value pairs
            entities = dict(entities)
        pinned[call["call_id"]] = {
            "record_sha256": call["record_sha256"],
            "rendered_request_sha256": call["rendered_request_sha256"],
            "request_sha256": call["request_sha256"],
            "rot_status": check.get("status"),
            "rot_components": sorted(check.get("components") or []),
            "entities": {k: v for k, v in sorted(entities.items()) if v},
            "content": _content_digest(call),
        }
    return dict(sorted(pinned.items()))


def test_demo_day_outputs_are_unchanged(tmp_path, instance):
    got = outputs(tmp_path, instance)
    want = json.loads(GOLDEN.read_text())
    assert sorted(got) == sorted(want), "the set of call_ids changed"
    changed = {
        field: sum(1 for cid in want if got[cid][field] != want[cid][field]) for field in next(iter(want.values()))
    }
    assert not any(changed.values()), f"calls whose pinned output changed, by field: {changed}"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, dg.instance_for_test() as inst:
        GOLDEN.write_text(json.dumps(outputs(Path(tmp), inst), indent=1) + "\n")
    print(f"wrote {GOLDEN}")
