"""Quotes: rulebook sentences shown verbatim, with their section and page.

Every answer has them, whichever backend runs: they are what a player can check. They come
from one passage, the one that answers best: on the gold set, quoting the closest sentences
of one passage instead of the closest of all five carried more key facts and cited a
passage holding the evidence far more often, and so did the held-out sets
(`bench/quotes.py`, eval/RESULTS.md). A quote is shown only when its text is an
exact substring of its passage, so nothing that reads as rule text can have been altered.
Passages are numbered [1], [2] … in the order their best sentence ranks; a passage's
sentences share its number and keep their reading order.
"""

from __future__ import annotations

from collections.abc import Sequence

from rag.answering.candidates import Sentence
from rag.types import Check, Citation, Hit, Quote

# A passage answers by its two closest sentences together: a rule is usually a condition
# and what follows from it, so a one-line glossary entry that merely echoes the question's
# words ("Test: Perform a Stealth test …") does not outrank the section that states it.
SENTENCES_SUMMED = 2


def is_verbatim(text: str, hit: Hit) -> bool:
    return bool(text.strip()) and text in hit.chunk.text


def deciding_sentences(
    ranked: Sequence[Sentence],
    most: int,
    summed: int = SENTENCES_SUMMED,
    rank_penalty: float = 0.0,
) -> list[Sentence]:
    """The closest `most` sentences (best first) of the passage that answers best: the one
    whose `summed` closest sentences have the highest similarities added up (a passage of
    fewer sentences adds fewer), each less `rank_penalty` per place its passage stands below
    retrieval's first.

    No penalty by default: 0.04 a place quoted the passage holding the evidence more often
    on every gold set (0.77 to 0.81 on gold, 0.83 to 0.94 held out), but it moved both
    stealth questions ("when can't I do a stealth test?", in English and Chinese) off the
    rule that decides them, onto the Stealth test section retrieval ranks above it
    (eval/RESULTS.md, session 10)."""
    by_passage: dict[str, list[Sentence]] = {}
    for sentence in ranked:  # best first, so each passage's list is too
        by_passage.setdefault(sentence.hit.chunk.id, []).append(sentence)
    if not by_passage:
        return []
    best = max(
        by_passage.values(),
        key=lambda own: sum(s.score - rank_penalty * s.passage for s in own[:summed]),
    )
    return best[:most]


def make_quotes(sentences: Sequence[Sentence]) -> tuple[list[Quote], Check]:
    """Quotes for the sentences (best first), numbered by passage; any not verbatim in its
    passage is left out, and the check says so."""
    numbers: dict[str, int] = {}
    kept: list[tuple[Sentence, int]] = []
    altered = 0
    for sentence in sentences:
        if not is_verbatim(sentence.text, sentence.hit):
            altered += 1
            continue
        n = numbers.setdefault(sentence.hit.chunk.id, len(numbers) + 1)
        kept.append((sentence, n))
    kept.sort(key=lambda pair: (pair[1], pair[0].position))
    quotes = [
        Quote(
            n=n,
            chunk_id=s.hit.chunk.id,
            game=s.hit.chunk.game,
            section=s.hit.chunk.section_path,
            page=s.hit.chunk.page,
            text=s.text,
        )
        for s, n in kept
    ]
    detail = f"{altered} sentence(s) not found verbatim, left out" if altered else ""
    return quotes, Check("quotes", altered == 0 and bool(quotes), detail or f"{len(quotes)} shown")


def citations_for(quotes: Sequence[Quote], hits: Sequence[Hit]) -> list[Citation]:
    """One citation per quoted passage, in marker order."""
    by_id = {hit.chunk.id: hit for hit in hits}
    cited: dict[int, Citation] = {}
    for quote in quotes:
        hit = by_id[quote.chunk_id]
        cited.setdefault(
            quote.n,
            Citation(
                n=quote.n,
                chunk_id=hit.chunk.id,
                game=hit.chunk.game,
                section=hit.chunk.section_path,
                text=hit.chunk.text,
            ),
        )
    return [cited[n] for n in sorted(cited)]
