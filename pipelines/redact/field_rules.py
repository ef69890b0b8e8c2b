"""What the policy says about one field: public, sensitive, structural,
natural language, and which context words its key name carries."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache

from pipelines.redact.check_digits import is_valid_cnpj, is_valid_cpf
from pipelines.redact.entities import CNPJ, CPF, SSN, VOCABULARY, context_forms
from pipelines.redact.policy import Policy

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


@lru_cache(maxsize=100_000)
def snake(key: str) -> str:
    """``traceId`` -> ``trace_id``; ``X-Api-Key`` -> ``x_api_key``."""
    return _CAMEL.sub("_", key).replace("-", "_").replace(" ", "_").lower()


@dataclass(frozen=True)
class FieldInfo:
    public: bool = False
    sensitive: str | None = None  # the entity the whole value is
    identity: str | None = None  # an identity document's key: the entity a short value with a digit is
    structural: bool = False
    natural_language: bool = False
    context: tuple[str, ...] = ()
    template_text: tuple[str, ...] = ()  # a templated system prompt's: see ``template_text``


class _Globs:
    def __init__(self, globs: tuple[str, ...]):
        self.keys = tuple(g.lower() for g in globs if "." not in g)
        self.paths = tuple(g.lower() for g in globs if "." in g)

    def match(self, path: str, key: str) -> bool:
        return any(fnmatchcase(key, g) for g in self.keys) or any(fnmatchcase(path, g) for g in self.paths)


# Where a call's rendered system prompt is
SYSTEM_PROMPT_FIELDS = ("system_text", "request_json.system", "request_json.system.text")


class FieldRules:
    """Classifies a field by its path (``messages.parts.text``) and key (``text``).
    Results are cached: a day of traces has few distinct paths. ``template_text``:
    the rules for a call rendered from a template in the store, whose literal parts
    these are: a name they write in the system prompt is kept (``template_text``)."""

    def __init__(self, policy: Policy, template_text: tuple[str, ...] = ()):
        rules = policy.fields
        self._public = _Globs(rules.public)
        self._sensitive = [(entity, _Globs(globs)) for entity, globs in rules.sensitive.items()]
        self._identity = [(entity, _Globs(globs)) for entity, globs in rules.identity.items()]
        self._structural = _Globs(rules.structural)
        self._natural = _Globs(rules.natural_language)
        self._operator = _Globs(rules.operator_text)
        self._system = _Globs(SYSTEM_PROMPT_FIELDS)
        self._template_text = template_text
        self._cache: dict[str, FieldInfo] = {}

    def info(self, path: str) -> FieldInfo:
        found = self._cache.get(path)
        if found is None:
            found = self._cache[path] = self._classify(path)
        return found

    def _classify(self, path: str) -> FieldInfo:
        key = path.rsplit(".", 1)[-1]
        if not key:
            return FieldInfo()
        if self._public.match(path, key):
            return FieldInfo(public=True)
        for entity, globs in self._sensitive:
            if globs.match(path, key):
                return FieldInfo(sensitive=entity)
        identity = next((entity for entity, globs in self._identity if globs.match(path, key)), None)
        context = tuple(sorted(context_forms(key) & VOCABULARY))
        natural = self._natural.match(path, key) and not self._operator.match(path, key)
        return FieldInfo(
            identity=identity,
            structural=self._structural.match(path, key),
            natural_language=natural,
            context=context,
            template_text=self._template_text if natural and self._system.match(path, key) else (),
        )


# An identity value is short: a longer text under such a key (a "document" to summarize) is text
IDENTITY_CHARS = 40
_SSN_FORMATTED = re.compile(r"\d{3}-\d{2}-\d{4}")
# what is left of an identity value no replacement wrote: digits and the separators ids are written with
RAW_IDENTITY = re.compile(r"[\d\s./-]*\d[\d\s./-]*")


def whole_entity(info: FieldInfo, value: str) -> str | None:
    """The entity a whole value is, detected or not: the field's sensitive entity; under an
    identity key, a value of at most IDENTITY_CHARS with a digit in it (a JSON integer that lost
    its leading zeros, a short one, one without valid check digits) is an identity document,
    of the type its form shows (a valid CNPJ or CPF, a formatted SSN), else the key's."""
    if info.sensitive is not None:
        return info.sensitive
    if info.identity is None or len(value) > IDENTITY_CHARS or not any(c.isdigit() for c in value):
        return None
    if is_valid_cnpj(value):
        return CNPJ
    if is_valid_cpf(value):
        return CPF
    return SSN if _SSN_FORMATTED.fullmatch(value.strip()) else info.identity
