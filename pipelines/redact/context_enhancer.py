"""Context words raise a match's score; this enhancer does it in linear time.

presidio's LemmaContextAwareEnhancer looks up the token of every raw hit by
scanning the token list and tests lemmas against a list, so its cost grows
with hits x tokens: a 320 KB JSON array of numbers took minutes. Here the
positions of context words are found once per text, and each hit only looks
at the few words before it. Stop words are not filtered out either: spaCy's
English list holds "call", "name" and "first", which are good context.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from presidio_analyzer import EntityRecognizer, RecognizerResult
from presidio_analyzer.context_aware_enhancers import ContextAwareEnhancer
from presidio_analyzer.nlp_engine import NlpArtifacts

from pipelines.redact.entities import VOCABULARY, context_forms


class NearbyContextEnhancer(ContextAwareEnhancer):
    def __init__(
        self, words_before: int = 5, words_after: int = 2, boost: float = 0.35, min_score_with_context: float = 0.4
    ):
        super().__init__(
            context_similarity_factor=boost,
            min_score_with_context_similarity=min_score_with_context,
            context_prefix_count=words_before,
            context_suffix_count=words_after,
        )

    def enhance_using_context(
        self,
        text: str,
        raw_results: list[RecognizerResult],
        nlp_artifacts: NlpArtifacts,
        recognizers: list[EntityRecognizer],
        context: list[str] | None = None,
    ) -> list[RecognizerResult]:
        contexts = {r.id: {w.strip().lower() for w in r.context} for r in recognizers if r.context}
        if not raw_results or not contexts:
            return raw_results
        explicit = set()
        for word in context or ():
            explicit |= context_forms(word)

        # one pass over the tokens: word ordinals, and where context words sit
        starts: list[int] = []
        hit_ordinals: list[int] = []
        hit_forms: list[set[str]] = []
        ordinal_of_token: list[int] = []
        if nlp_artifacts is not None and nlp_artifacts.tokens is not None:
            ordinal = -1
            for token, lemma in zip(nlp_artifacts.tokens, nlp_artifacts.lemmas, strict=False):
                if not (token.is_punct or token.is_space):
                    ordinal += 1
                starts.append(token.idx)
                ordinal_of_token.append(max(ordinal, 0))
                forms = context_forms(lemma or token.lower_) & VOCABULARY
                if forms:
                    hit_ordinals.append(max(ordinal, 0))
                    hit_forms.append(forms)

        for result in raw_results:
            words = contexts.get(result.recognition_metadata.get(RecognizerResult.RECOGNIZER_IDENTIFIER_KEY))
            if not words or result.recognition_metadata.get(RecognizerResult.IS_SCORE_ENHANCED_BY_CONTEXT_KEY):
                continue
            found = bool(explicit & words)
            if not found and hit_ordinals:
                first = max(bisect_right(starts, result.start) - 1, 0)
                last = max(bisect_right(starts, max(result.end - 1, result.start)) - 1, 0)
                lo = bisect_left(hit_ordinals, ordinal_of_token[first] - self.context_prefix_count)
                hi = bisect_right(hit_ordinals, ordinal_of_token[last] + self.context_suffix_count)
                found = any(hit_forms[i] & words for i in range(lo, hi))
            if found:
                result.score = min(
                    max(result.score + self.context_similarity_factor, self.min_score_with_context_similarity),
                    ContextAwareEnhancer.MAX_SCORE,
                )
        return raw_results
