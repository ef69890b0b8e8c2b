"""The retention policy file: the shipped default, and errors that name the file, the key and what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.retention.policy import DEFAULT_POLICY, PolicyError, load_policy


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "retention.yaml"
    path.write_text(text)
    return path


def test_the_default_policy_ships_in_the_package_with_the_documented_rules():
    assert DEFAULT_POLICY.parent.name == "retention" and DEFAULT_POLICY.exists()
    policy = load_policy()
    keep = policy.always_keep
    assert (policy.version, policy.hot_window_days, policy.base_rate) == (1, 7, 0.10)
    assert keep.negative_feedback is True and keep.errors and keep.escalated and keep.guardrail_hit and keep.flagged
    assert (keep.eval_score_below, keep.latency_ms_over, keep.cost_usd_over) == (3.0, 10_000, 0.50)
    assert keep.tail.percentile == 99
    assert [(s.name, s.match) for s in keep.segments] == [("vip", {"user_tier": "vip"})]
    assert "tool_call_id" in policy.sweep.keep_span_attributes


def test_a_policy_file_with_its_own_rates_loads(tmp_path):
    path = _write(
        tmp_path,
        """
version: 4
base_rate: 0.05
strata:
  rates:
    - match: {route: support.triage}
      rate: 0.01
    - match: {language: [pt-BR], input_bucket: "1k-4k"}
      rate: 0.5
""",
    )
    policy = load_policy(path)
    assert policy.policy_version == "4" and policy.base_rate == 0.05
    assert [r.rate for r in policy.strata.rates] == [0.01, 0.5]
    assert policy.sha256 != load_policy().sha256


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("version: 1\nalways_keep:\n  latencyms_over: 5\n", "key 'always_keep.latencyms_over' is not a retention"),
        ("version: 1\nbase_rate: 1.5\n", "key 'base_rate': Input should be less than or equal to 1"),
        ("version: 1\nhot_window_days: soon\n", "key 'hot_window_days': Input should be a valid integer"),
        ("version: 1\nalways_keep:\n  negative_feedback: false\n", "negative feedback is always kept"),
        ("base_rate: 0.1\n", "key 'version' is required"),
        (
            "version: 1\nstrata:\n  rates:\n    - match: {input_bucket: huge}\n      rate: 0.5\n",
            "key 'strata.rates.0.match.input_bucket': 'huge' is not a bucket; expected one of",
        ),
        ("version: 1\nstrata:\n  input_length_buckets: [900, 100]\n", "in increasing order"),
        ("version: 1\nbase_rate: [0.1\n", ": line 3, column 1: not valid YAML"),
        ("- just\n- a list\n", "expected a mapping of settings at the top level"),
    ],
)
def test_a_bad_policy_file_says_which_file_which_key_and_what_was_expected(tmp_path, text, expected):
    path = _write(tmp_path, text)
    with pytest.raises(PolicyError) as error:
        load_policy(path)
    assert str(path) in str(error.value)
    assert expected in str(error.value)


def test_a_missing_policy_file_says_what_to_do(tmp_path):
    with pytest.raises(PolicyError, match="no such file; pass the path of a YAML policy, or none for the default"):
        load_policy(tmp_path / "nope.yaml")
