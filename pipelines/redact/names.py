"""Person names: NER once per distinct line of a batch.

NER is most of what redaction costs, and the text it reads repeats by the
line, not by the field: a system prompt made unique per call by the order
number it quotes shares every other line with a thousand others, and a
conversation quotes its earlier turns. So natural-language texts are split
into lines, each distinct line is read by the model once in a redactor's
life (batched), and its names are reused, shifted to where the line sits,
in every text that holds it. A line with no upper-case letter is not read
at all: a name must have a capitalized word (``nlp._looks_like_a_name``).

Regex recognizers are not affected: they still see every text whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pipelines.redact.nlp import LANGUAGE, LOWER_LEMMA, PipelineNlpEngine, person_names

OVERLAP = 256  # characters shared by neighbouring chunks of a large field
NER_SCORE = 0.85  # what presidio's spaCy recognizer gives every NER entity
CACHE_LIMIT = 500_000  # distinct lines remembered; past it the memory is cleared
BATCH_SIZE = 256  # 10% faster than 64; the model reads each line alone whatever the batch
# NER reads entities only: the lemma component (context words) would walk every token for nothing
NOT_FOR_NAMES = (LOWER_LEMMA,)

Span = tuple[int, int]


def chunks(text: str, size: int) -> list[tuple[int, str]]:
    """Split at whitespace near ``size``, neighbours overlapping by OVERLAP
    characters so an entity on a boundary is whole in one of them."""
    out = []
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            cut = text.rfind("\n", start + size // 2, end)
            if cut < 0:
                cut = text.rfind(" ", start + size // 2, end)
            end = cut + 1 if cut > 0 else end
        out.append((start, text[start:end]))
        if end >= len(text):
            break
        start = max(end - OVERLAP, start + 1)
    return out


def may_name(line: str) -> bool:
    """False only when no name can be in the line: it has no upper-case letter."""
    if line != line.lower():
        return True
    # an upper-case letter with no lower-case form leaves lower() unchanged
    return not line.isascii() and any(c.isupper() for c in line)


def lines(text: str) -> Iterator[tuple[int, str]]:
    """(offset, line) for each line of ``text`` (split at "\\n")."""
    offset = 0
    for line in text.split("\n"):
        yield offset, line
        offset += len(line) + 1


class LineNames:
    """PERSON spans by line, each distinct line analyzed once.

    ``prepare`` runs the model over the new lines of many texts as one batch;
    ``spans`` then assembles a text's names from its lines (a line not
    prepared is analyzed on the spot). Counters (lines and characters read,
    lines reused) are for the stats, never the text.
    """

    def __init__(self, engine: PipelineNlpEngine, max_line_chars: int = 100_000):
        self.engine = engine
        self.max_line_chars = max_line_chars
        self._found: dict[str, tuple[Span, ...]] = {}
        self.lines_read = 0
        self.chars_read = 0
        self.lines_reused = 0

    def prepare(self, texts: Iterable[str]) -> None:
        """Run the model over the distinct new lines of ``texts`` that may hold a name (one batch)."""
        todo = list(dict.fromkeys(line for text in texts for _, line in lines(text) if line not in self._found))
        todo = [line for line in todo if may_name(line)]
        if len(self._found) + len(todo) > CACHE_LIMIT:
            self._found.clear()
        short = [line for line in todo if len(line) <= self.max_line_chars]
        docs = self.engine.nlp[LANGUAGE].pipe(short, batch_size=BATCH_SIZE, disable=NOT_FOR_NAMES)
        for line, doc in zip(short, docs, strict=True):
            self._store(line, self._people(doc))
        for line in todo:
            if len(line) > self.max_line_chars:
                self._store(line, self._long_line(line))

    def spans(self, text: str) -> list[Span]:
        out: list[Span] = []
        for offset, line in lines(text):
            if not may_name(line):
                continue
            found = self._found.get(line)
            if found is None:
                self.prepare([line])
                found = self._found[line]
            else:
                self.lines_reused += 1
            out += [(start + offset, end + offset) for start, end in found]
        return out

    def _store(self, line: str, found: tuple[Span, ...]) -> None:
        self._found[line] = found
        self.lines_read += 1
        self.chars_read += len(line)

    def _people(self, doc) -> tuple[Span, ...]:
        return tuple((ent.start_char, ent.end_char) for ent in person_names(doc))

    def _long_line(self, line: str) -> tuple[Span, ...]:
        found: set[Span] = set()
        for offset, chunk in chunks(line, self.max_line_chars):
            doc = self.engine.nlp[LANGUAGE](chunk, disable=NOT_FOR_NAMES)
            found |= {(start + offset, end + offset) for start, end in self._people(doc)}
        kept: list[Span] = []
        for span in sorted(found, key=lambda s: (-(s[1] - s[0]), s[0])):
            if all(span[1] <= k[0] or span[0] >= k[1] for k in kept):
                kept.append(span)
        return tuple(sorted(kept))
