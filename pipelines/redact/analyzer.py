"""The offline analyzer: text in, entity spans out.

``TextAnalyzer`` wraps one presidio ``AnalyzerEngine`` built from
``recognizers.build_recognizers`` over a blank spaCy pipeline. Person names
(natural-language fields, when NER is enabled) come from ``names.LineNames``:
the NER model reads each distinct line once. Around presidio it adds what
trace content needs: a cheap pre-filter that skips recognizers a text cannot
satisfy (no digits, no phone), chunking of very large fields, per-entity
score thresholds, an allow list, and one non-overlapping span per region.

Nothing here logs or raises with the analyzed text in it.
"""

from __future__ import annotations

import importlib.metadata
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import phonenumbers
import regex
from presidio_analyzer import AnalyzerEngine, PatternRecognizer, RecognizerRegistry

from pipelines.redact import nlp
from pipelines.redact.context_enhancer import NearbyContextEnhancer
from pipelines.redact.entities import (
    CARD,
    CNPJ,
    CONTEXT,
    CPF,
    CREDENTIAL,
    EMAIL,
    ENTITIES,
    IBAN,
    IP,
    PERSON,
    PHONE,
    SSN,
    UNAMBIGUOUS,
    UNAMBIGUOUS_WHEN_FORMATTED,
)
from pipelines.redact.names import NER_SCORE, LineNames, chunks
from pipelines.redact.patterns import CREDENTIALS, ascii_digits, compiled, may_hold_credential, with_ascii_digits
from pipelines.redact.recognizers import PHONE_CANDIDATE, build_recognizers
from pipelines.redact.template_text import in_template_text


class _WithoutDetails(logging.Filter):
    """presidio logs context words at debug level and, on some validation
    errors, the matched text at error level: keep the event, drop the details."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = f"presidio {record.levelname.lower()} in {record.module}.{record.funcName} (details withheld)"
        record.args = ()
        record.exc_info = record.exc_text = None
        return True


for _name in ("presidio-analyzer", "presidio-anonymizer"):
    logging.getLogger(_name).setLevel(logging.WARNING)
    logging.getLogger(_name).addFilter(_WithoutDetails())

# Bumped whenever recognizers or their scoring change; stored in the audit.
# 2: names found line by line; 3: system prompts read by NER (a template's own names kept),
# other scripts' digits read as ASCII ones
RECOGNIZERS_VERSION = "tracelake-redact-3"
# Entities whose recognizers use context words: only texts that may hold one
# of them pay for tokenization.
_CONTEXTUAL = frozenset(entity for entity, words in CONTEXT.items() if words)


# Fewer digits than this and the entity cannot be in the text
_MIN_DIGITS = {PHONE: 7, CARD: 12, SSN: 9, CPF: 11, CNPJ: 2, IBAN: 2, IP: 4}


_IP_GATE = re.compile(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}|:[0-9A-Fa-f]{0,4}:")


def _gates(recognizers: Sequence) -> dict[str, Callable[[str], bool]]:
    """Per entity, a cheap test that is true whenever its recognizer could match."""
    credentials = [compiled(p) for p in CREDENTIALS]
    gates: dict[str, Callable[[str], bool]] = {
        EMAIL: lambda text: "@" in text,
        CREDENTIAL: lambda text: may_hold_credential(text) and any(c.search(text) for c in credentials),
        PHONE: lambda text: PHONE_CANDIDATE.search(text) is not None,
        # presidio's IPv6 patterns are slow to search; every address they accept
        # (three groups or more) has a dotted quad or two colons with hex between
        IP: _IP_GATE.search,
    }
    for recognizer in recognizers:
        entity = recognizer.supported_entities[0]
        if isinstance(recognizer, PatternRecognizer) and entity not in gates:
            # the recognizer's own patterns, as one search
            joined = "|".join(f"(?:{p.regex})" for p in recognizer.patterns)
            gates[entity] = regex.compile(joined, recognizer.global_regex_flags or 0).search
    return gates


class Hit(NamedTuple):
    start: int
    end: int
    entity: str
    score: float


class AnalysisError(Exception):
    """Analysis failed. The message names the field and the failure class,
    never the text."""


@dataclass(frozen=True)
class DetectorSettings:
    """Everything an analyzer worker needs, in a picklable form."""

    entities: tuple[str, ...] = ENTITIES
    min_scores: dict[str, float] = field(default_factory=dict)
    phone_regions: tuple[str, ...] = ("BR", "US", "GB")
    ner: bool = False
    allow_list: tuple[str, ...] = ()
    chunk_chars: int = 100_000
    # a JSON number must be a validated match, or have a context word in its key
    number_min_score: float = 0.6


class Request(NamedTuple):
    """One text to analyze. ``restricted`` limits the search to unambiguous
    entities (values under id-like keys); ``number`` marks a JSON number.
    A tuple, not a dataclass: a day of traces builds millions of these."""

    text: str
    natural_language: bool = False
    context: tuple[str, ...] = ()
    restricted: bool = False
    number: bool = False
    # a templated system prompt: its template's literal parts (``template_text``); NER keeps the names they write
    template_text: tuple[str, ...] = ()


def detector_versions(ner: bool) -> dict[str, str]:
    versions = {
        "recognizers": RECOGNIZERS_VERSION,
        "presidio-analyzer": importlib.metadata.version("presidio-analyzer"),
        "spacy": importlib.metadata.version("spacy"),
        "phonenumbers": importlib.metadata.version("phonenumbers"),
    }
    model = nlp.ner_model_version()
    versions["ner"] = f"{nlp.NER_MODEL}=={model}" if ner and model else "off"
    return versions


def select_non_overlapping(hits: Sequence[Hit]) -> list[Hit]:
    """Highest score first, then longest; a hit overlapping a kept one is dropped."""
    kept: list[Hit] = []
    for hit in sorted(hits, key=lambda h: (-h.score, -(h.end - h.start), h.start)):
        if all(hit.end <= k.start or hit.start >= k.end for k in kept):
            kept.append(hit)
    return sorted(kept)


# A bare integer with no phone-like key is a phone only as a whole international
# number (country code included): 12+ digits (BR and GB mobiles: 13 and 12; US: 11
# is too close to other ids). Epoch milliseconds (13 digits from "17") parse as
# no valid number.
INTERNATIONAL_PHONE_DIGITS = 12


class TextAnalyzer:
    def __init__(self, settings: DetectorSettings | None = None):
        self.settings = settings or DetectorSettings()
        blank = nlp.PipelineNlpEngine(nlp.blank_pipeline())
        self._blank = blank
        self._names = (
            LineNames(nlp.PipelineNlpEngine(nlp.ner_pipeline()), self.settings.chunk_chars)
            if self.settings.ner
            else None
        )
        self._empty = blank.empty_artifacts()
        registry = RecognizerRegistry(
            # PERSON is not presidio's: its spaCy recognizer would need NER over the whole text
            recognizers=build_recognizers(self.settings.phone_regions, ner=False),
            supported_languages=[nlp.LANGUAGE],
        )
        self.engine = AnalyzerEngine(
            registry=registry,
            nlp_engine=blank,
            supported_languages=[nlp.LANGUAGE],
            context_aware_enhancer=NearbyContextEnhancer(),
        )
        self._enabled = frozenset(self.settings.entities)
        self._gates = _gates(registry.recognizers)
        self._allow = {v.casefold() for v in self.settings.allow_list}

    def versions(self) -> dict[str, str]:
        return detector_versions(self.settings.ner)

    def candidates(self, request: Request) -> list[str]:
        """Entities the text could hold at all: skipping the rest is what makes
        most trace text cheap. A digit count rules out most; then each
        recognizer's own patterns, searched without presidio's per-call cost,
        tell whether it can match (so skipping never loses a match)."""
        text = with_ascii_digits(request.text)
        allowed = (*UNAMBIGUOUS, *UNAMBIGUOUS_WHEN_FORMATTED) if request.restricted else ENTITIES
        digits = ascii_digits(text)
        wanted = []
        for entity in ENTITIES:
            if entity not in allowed or entity not in self._enabled or digits < _MIN_DIGITS.get(entity, 0):
                continue
            if entity == PERSON:
                if request.natural_language and self._names is not None and not request.number:
                    wanted.append(entity)
            elif entity in self._gates and self._gates[entity](text):
                wanted.append(entity)  # (an entity with no recognizer, ADDRESS, has no gate)
        return wanted

    def analyze(self, request: Request) -> list[Hit]:
        return self.analyze_many([request])[0]

    def analyze_many(self, requests: Sequence[Request]) -> list[list[Hit]]:
        """Analyze a batch; NER reads the new lines of its natural-language texts as one spaCy batch."""
        plans = [self.candidates(r) for r in requests]
        if self._names is not None:
            self._names.prepare(r.text for r, ents in zip(requests, plans, strict=True) if PERSON in ents)
        results = []
        for request, entities in zip(requests, plans, strict=True):
            try:
                results.append(self._analyze(request, entities))
            except AnalysisError:
                raise
            except Exception as e:  # presidio messages may quote the text
                raise AnalysisError(
                    f"analyzing a {len(request.text)}-character text failed with {type(e).__name__}"
                ) from None
        return results

    def ner_stats(self) -> dict[str, int]:
        """Lines and characters NER read, and lines whose names were reused (counts only)."""
        if self._names is None:
            return {}
        names = self._names
        return {"ner_lines": names.lines_read, "ner_chars": names.chars_read, "ner_lines_reused": names.lines_reused}

    def _analyze(self, request: Request, entities: list[str]) -> list[Hit]:
        if not entities:
            return []
        hits = []
        if PERSON in entities:
            entities = [e for e in entities if e != PERSON]
            spans = self._names.spans(request.text)
            if request.template_text:
                spans = [s for s in spans if not in_template_text(request.text, *s, request.template_text)]
            hits = [h for h in (self._hit(s, e, PERSON, NER_SCORE, request) for s, e in spans) if h is not None]
        return select_non_overlapping(hits + self._patterns(request, entities))

    def _patterns(self, request: Request, entities: list[str]) -> list[Hit]:
        """Hits of every recognizer but NER."""
        if not entities:
            return []
        # the patterns read other scripts' digits as ASCII ones, at the same positions
        request = request._replace(text=with_ascii_digits(request.text))
        text = request.text
        if len(text) > self.settings.chunk_chars:
            hits = []
            for offset, chunk in chunks(text, self.settings.chunk_chars):
                part = request._replace(text=chunk)
                hits += [
                    Hit(h.start + offset, h.end + offset, h.entity, h.score)
                    for h in select_non_overlapping(self._patterns(part, entities))
                ]
            return select_non_overlapping(set(hits))
        found = self._run(request, entities, self._empty)
        if any(r.score < 1.0 and r.entity_type in _CONTEXTUAL for r in found):
            # only now is it worth tokenizing: a context word may raise these scores
            found = self._run(request, entities, self._blank.process_text(text, nlp.LANGUAGE))
        hits = [h for h in (self._hit(r.start, r.end, r.entity_type, r.score, request) for r in found) if h is not None]
        if not hits and request.number and PHONE in self._enabled:
            hits = self._international_phone(request)
        return hits

    def _allowed(self, text: str, start: int, end: int) -> bool:
        """The match is an allow-listed value, lies inside a mention of one ("Aurora"
        in "Loja Aurora" when the allow-list names the brand), or is one plus
        lower-case words around it ("da Loja Aurora")."""
        found = text[start:end]
        if found.casefold() in self._allow:
            return True
        rest = found
        for value in self._allow:
            rest = re.sub(re.escape(value), " ", rest, flags=re.IGNORECASE)
        if rest != found and not any(word[:1].isupper() for word in rest.split()):
            return True
        folded = text.casefold()
        for value in self._allow:
            at = folded.find(value, max(0, end - len(value)))
            while 0 <= at <= start:
                if at + len(value) >= end:
                    return True
                at = folded.find(value, at + 1)
        return False

    def _international_phone(self, request: Request) -> list[Hit]:
        """A JSON integer written as a phone without its "+" (5511987654321): under
        a phone-like key any valid number; under any other key (``customer_id``)
        a full international number of one of the policy's regions."""
        if len(request.text) < INTERNATIONAL_PHONE_DIGITS and not request.context:
            return []
        try:
            number = phonenumbers.parse("+" + request.text, None)
        except phonenumbers.NumberParseException:
            return []
        if not phonenumbers.is_valid_number(number):
            return []
        if not request.context and phonenumbers.region_code_for_number(number) not in self.settings.phone_regions:
            return []
        return [Hit(0, len(request.text), PHONE, 0.75)]

    def _run(self, request: Request, entities: list[str], artifacts) -> list:
        return self.engine.analyze(
            request.text,
            language=nlp.LANGUAGE,
            entities=entities,
            context=list(request.context) or None,
            nlp_artifacts=artifacts,
            score_threshold=0.0,
        )

    def _hit(self, start: int, end: int, entity: str, score: float, request: Request) -> Hit | None:
        text = request.text
        min_score = self.settings.min_scores.get(entity, 0.5)
        if request.number:
            # a bare number is only an entity as a whole, and needs strong evidence
            if start != 0 or end != len(text):
                return None
            if not request.context:
                min_score = max(min_score, self.settings.number_min_score)
        if score < min_score:
            return None
        if request.restricted and entity in UNAMBIGUOUS_WHEN_FORMATTED:
            if text[start:end].isalnum():
                return None
        if self._allow and self._allowed(text, start, end):
            return None
        return Hit(start, end, entity, round(score, 4))
