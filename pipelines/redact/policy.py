"""The redaction policy: a versioned YAML file, validated with pydantic.

It says, per entity type, which operator replaces a match and how sure a
detector must be; which fields are public (left as is), sensitive (the whole
value is an entity, whatever its content), structural (ids, types, model
names: left alone except for unambiguous entities such as emails) or natural
language (where person-name NER runs). ``default_policy.yaml`` next to this
module is the default and documents every key.
"""

from __future__ import annotations

import hashlib
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from pipelines.redact.entities import ENTITIES

DEFAULT_POLICY = Path(__file__).with_name("default_policy.yaml")

Operator = Literal["mode", "placeholder", "encrypt", "synthetic", "redact", "mask", "keep"]
EntityName = Literal[
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "IBAN_CODE",
    "IP_ADDRESS",
    "US_SSN",
    "BR_CPF",
    "BR_CNPJ",
    "CREDENTIAL",
    "PERSON",
    "ADDRESS",
]


class PolicyError(ValueError):
    """A policy file that cannot be used; the message names the file, the key and what was expected."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EntityRule(_Strict):
    operator: Operator = Field(
        "mode",
        description="mode: whatever the run's mode is (placeholder, encrypt or synthetic); "
        "redact: <TYPE> with no number; mask: keep the last 4 characters; keep: leave it",
    )
    min_score: float = Field(0.5, ge=0.0, le=1.0, description="Detector confidence needed to redact")


class FieldRules(_Strict):
    """Globs over key names (no dot: matches the last key, snake_cased) or over
    dotted paths (``retrieval.documents.text``; list positions are left out)."""

    public: tuple[str, ...] = Field((), description="Fields left as they are (no personal data by construction)")
    sensitive: dict[EntityName, tuple[str, ...]] = Field(
        default_factory=dict, description="Fields whose whole value is that entity, detected or not"
    )
    identity: dict[EntityName, tuple[str, ...]] = Field(
        default_factory=dict,
        description="Fields holding an identity document (tax id, CPF, SSN): a short value with a digit there "
        "is one whatever its form (a JSON integer that lost its leading zeros, no valid check digits); "
        "a valid CNPJ or CPF, or a formatted SSN, is that type, else the one named here. The residual "
        "screen flags any digits left there",
    )
    structural: tuple[str, ...] = Field((), description="Ids, types, hashes, model names, timestamps")
    natural_language: tuple[str, ...] = Field((), description="Fields where person-name NER runs")
    operator_text: tuple[str, ...] = Field(
        (),
        description="Text the operator wrote (tool descriptions and schemas): patterns still apply, person-name "
        "NER does not, so a brand or product name survives. System prompts join them when the call "
        "records its template (then only the template's variables are user data)",
    )


class NerSettings(_Strict):
    enabled: Literal["auto", "on", "off"] = Field(
        "auto", description="auto: use the NER model when its extra is installed"
    )


class Policy(_Strict):
    version: str = Field(min_length=1, description="The policy's own version, stored in every audit row")
    name: str = "default"
    entities: dict[EntityName, EntityRule] = Field(default_factory=dict)
    fields: FieldRules = FieldRules()
    public_documents: tuple[str, ...] = Field(
        (), description="Globs over retrieved doc_id: documents with no personal data (a knowledge base)"
    )
    allow_list: tuple[str, ...] = Field((), description="Values never redacted (a support address)")
    phone_regions: tuple[str, ...] = ("BR", "US", "GB")
    ner: NerSettings = NerSettings()
    large_field_chars: int = Field(100_000, ge=1_000, le=900_000, description="Fields longer than this are chunked")
    # set by parse_policy: where it came from and a hash of its bytes
    _source: str = PrivateAttr("<memory>")
    _sha256: str = PrivateAttr("")

    @property
    def source(self) -> str:
        return self._source

    @property
    def sha256(self) -> str:
        """sha256 of the policy file's bytes, or of its settings when built in memory."""
        return self._sha256 or hashlib.sha256(self.model_dump_json().encode()).hexdigest()

    def rule(self, entity: str) -> EntityRule:
        return self.entities.get(entity) or EntityRule()

    def enabled_entities(self) -> tuple[str, ...]:
        return tuple(e for e in ENTITIES if self.rule(e).operator != "keep")

    def is_public_document(self, doc_id: str | None) -> bool:
        return doc_id is not None and any(fnmatchcase(doc_id, g) for g in self.public_documents)


def _location(loc: tuple) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_policy(data: object, source: str = "<memory>", raw: bytes = b"") -> Policy:
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: expected a mapping with at least a 'version' key, got {type(data).__name__}")
    try:
        policy = Policy.model_validate(data)
    except pydantic.ValidationError as e:
        problems = []
        for err in e.errors():
            where = _location(err["loc"])
            if err["type"] == "extra_forbidden":
                problems.append(f"key '{where}' is not a policy setting (check the spelling; see default_policy.yaml)")
            elif err["type"] == "missing":
                problems.append(f"key '{where}' is required")
            else:
                problems.append(f"key '{where}': {err['msg']} (got {_describe(err.get('input'))})")
        raise PolicyError(f"{source}: invalid redaction policy:\n  " + "\n  ".join(problems)) from None
    policy._source = source
    policy._sha256 = hashlib.sha256(raw).hexdigest() if raw else ""
    return policy


# Mappings merged one level deep with the default policy; other keys replace it whole
_MERGED = ("entities", "fields")


def with_defaults(data: dict, defaults: dict) -> dict:
    """A policy file only states what it changes: every key it leaves out keeps
    the default's value (``entities`` and ``fields`` per entry)."""
    merged = dict(defaults)
    for key, value in data.items():
        if key in _MERGED and isinstance(value, dict) and isinstance(defaults.get(key), dict):
            merged[key] = {**defaults[key], **value}
        else:
            merged[key] = value
    return merged


def _read_yaml(file: Path) -> tuple[object, bytes]:
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise PolicyError(f"{file}: no such redaction policy file (pass --policy with an existing YAML file)") from None
    try:
        return yaml.safe_load(raw), raw
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PolicyError(f"{file}: not valid YAML{where}: {getattr(e, 'problem', None) or e}") from None


def load_policy(path: str | Path | None = None) -> Policy:
    """Read and validate a policy file; None reads the default shipped with tracelake."""
    file = Path(path) if path is not None else DEFAULT_POLICY
    data, raw = _read_yaml(file)
    if file != DEFAULT_POLICY and isinstance(data, dict):
        defaults, _ = _read_yaml(DEFAULT_POLICY)
        # a policy's version and name are its own, never the default's
        inherited = {k: v for k, v in defaults.items() if k not in ("version", "name")}
        data = with_defaults({"name": file.stem, **data}, inherited)
    return parse_policy(data, str(file), raw)
