"""Which language an answer is written in, from its function words: enough to
tell English from Portuguese (the languages in segments today) without a model.
Unknown languages and texts too short to tell return None."""

from __future__ import annotations

import re

WORDS = {
    "en": frozenset(
        "the and you your is are to of for we i it this that with have has on in be can will not our "
        "please thanks".split()
    ),
    "pt": frozenset(
        "o a os as e é de do da dos das para com não você seu sua um uma no na em que por obrigado obrigada "
        "olá pedido seu meu minha foi está são pode podemos".split()
    ),
}
TOKEN = re.compile(r"[^\W\d_]+", re.UNICODE)
MIN_HITS = 2


def base_language(code: str | None) -> str | None:
    """'pt-BR' -> 'pt'."""
    return code.split("-")[0].lower() if code else None


def detect(text: str | None) -> str | None:
    if not text:
        return None
    tokens = [t.lower() for t in TOKEN.findall(text)]
    hits = {lang: sum(t in words for t in tokens) for lang, words in WORDS.items()}
    best = max(hits, key=hits.get)
    others = [v for k, v in hits.items() if k != best]
    if hits[best] < MIN_HITS or any(v >= hits[best] for v in others):
        return None
    return best


def matches(text: str | None, expected: str | None) -> bool | None:
    """True/False when both languages are known; None when either is not."""
    found, want = detect(text), base_language(expected)
    if found is None or want not in WORDS:
        return None
    return found == want
