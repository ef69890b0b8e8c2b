"""Turn a stored request body into what the SDK sends, under one API version.

Translation: parameters the target refuses are removed before sending, decided
once per (model family, API version) from the rules shipped as data
(``parameters.yaml``), not discovered by a 400 per request. A refusal the rules
do not know is learned from the first 400 that names it (``Translator.learn``) and
applied to every later request of the run, batch entries included. The ledger
keeps both sides: the request asked (its key) and the one sent, with what was
removed and why.

anthropic 2.14's ``messages.create`` takes no ``temperature``, ``top_p`` or
``top_k``: when they are sent at all they travel in ``extra_body``. Prompt
caching marks the prefix the calls of one candidate share (the tools and the
system prompt) with ``cache_control``; that changes the bytes sent, not the
request's key.
"""

from __future__ import annotations

import copy
import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from pipelines.llm.pricing import family

log = logging.getLogger(__name__)

SAMPLING = ("temperature", "top_p", "top_k")
EPHEMERAL = {"type": "ephemeral"}
RULES = Path(__file__).with_name("parameters.yaml")
LEARNED = "learned_from_400"
# a request's parameters that can never be dropped (without them there is no request)
REQUIRED = ("model", "messages", "max_tokens")
_REFUSAL = re.compile(
    r"extra inputs are not permitted|not supported|unsupported|deprecated|not allowed|cannot both be specified"
    r"|is not available|not permitted",
    re.IGNORECASE,
)


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    api_versions: tuple[str, ...] = Field(min_length=1)
    models: tuple[str, ...] = Field(min_length=1)
    drop: tuple[str, ...] = ()
    not_with: dict[str, str] = Field(default_factory=dict)
    reason: str = Field(min_length=1, pattern=r"^[a-z0-9_]+$")

    def applies(self, model_family: str, api_version: str) -> bool:
        return api_version in self.api_versions and ("*" in self.models or model_family in self.models)


class _Rules(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    version: Literal[1] = 1
    rules: tuple[Rule, ...] = ()


@cache
def shipped_rules() -> tuple[Rule, ...]:
    return _Rules.model_validate(yaml.safe_load(RULES.read_text())).rules


@dataclass
class Translator:
    """Removes what the API refuses from requests sent under ``api_version``."""

    api_version: str
    rules: tuple[Rule, ...] = field(default_factory=shipped_rules)
    learned: dict[str, dict[str, str]] = field(default_factory=dict)  # family -> {param: reason}
    _decided: dict[tuple[str, frozenset[str]], dict[str, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def dropped(self, body: Mapping[str, Any]) -> dict[str, str]:
        """{parameter: reason} of what ``body`` loses before it is sent (decided once per model)."""
        model = family(str(body.get("model") or ""))
        present = frozenset(k for k in body if k not in REQUIRED)
        key = (model, present)
        with self._lock:
            found = self._decided.get(key)
            if found is None:
                found = self._decide(model, present)
                self._decided[key] = found
        return found

    def _decide(self, model: str, present: frozenset[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for rule in self.rules:
            if not rule.applies(model, self.api_version):
                continue
            for name in rule.drop:
                if name in present:
                    out.setdefault(name, rule.reason)
            for name, other in rule.not_with.items():
                if name in present and other in present and other not in out:
                    out.setdefault(name, rule.reason)
        for name, reason in self.learned.get(model, {}).items():
            if name in present:
                out.setdefault(name, reason)
        return out

    def learn(self, body: Mapping[str, Any], message: str) -> str | None:
        """The parameter a 400's ``message`` refuses in ``body`` (sent as translated), now removed
        from every later request on that model; None when the 400 is about something else."""
        refused = refused_parameter(message, body)
        if refused is None:
            return None
        model = family(str(body.get("model") or ""))
        with self._lock:
            self.learned.setdefault(model, {})[refused] = LEARNED
            self._decided = {k: v for k, v in self._decided.items() if k[0] != model}
        log.warning(
            "the API refused %s for %s under anthropic-version %s (%s); it is removed from every later request of "
            "this run. Add it to pipelines/llm/parameters.yaml so the next run plans for it.",
            refused,
            model,
            self.api_version,
            message[:200],
        )
        return refused

    def wire(self, body: Mapping[str, Any], *, cache_prefix: bool) -> tuple[dict[str, Any], dict[str, str]]:
        """(the JSON body as it goes on the wire, {parameter: reason} of what was removed)."""
        dropped = self.dropped(body)
        out = with_cache_control(body) if cache_prefix else copy.deepcopy(dict(body))
        for name in dropped:
            out.pop(name, None)
        out.pop("stream", None)
        return out, dropped


def refused_parameter(message: str, sent: Mapping[str, Any]) -> str | None:
    """The optional parameter a 400 says the model or API version refuses, if that is what it says.

    "temperature: Extra inputs are not permitted" (2026-10-21), "`temperature` is
    deprecated for this model.", "`temperature` and `top_p` cannot both be specified
    for this model." (the later-named one is refused), "`top_k` is not supported ..."."""
    if not _REFUSAL.search(message or ""):
        return None
    named = [
        (m.start(), name)
        for name in sent
        if name not in REQUIRED
        for m in [re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", message)]
        if m is not None
    ]
    if not named:
        return None
    named.sort()
    return named[-1][1] if "cannot both" in message else named[0][1]


def with_cache_control(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body with a cache breakpoint after the tools and after the system prompt."""
    out = copy.deepcopy(dict(body))
    if out.get("tools"):
        out["tools"][-1] = {**out["tools"][-1], "cache_control": EPHEMERAL}
    system = out.get("system")
    if isinstance(system, str) and system:
        out["system"] = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
    elif isinstance(system, list) and system:
        out["system"][-1] = {**out["system"][-1], "cache_control": EPHEMERAL}
    return out


def split_for_sdk(wire: dict[str, Any], accepted_kwargs: frozenset[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(keyword arguments ``messages.create`` takes, the rest as ``extra_body``)."""
    kwargs = {k: v for k, v in wire.items() if k in accepted_kwargs and k not in SAMPLING}
    extra = {k: v for k, v in wire.items() if k not in kwargs}
    return kwargs, extra


def sampling_record(body: Mapping[str, Any], dropped: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """{param: {"value", "accepted"}} for the sampling parameters the request asked for."""
    return {name: {"value": body[name], "accepted": name not in dropped} for name in SAMPLING if name in body}
