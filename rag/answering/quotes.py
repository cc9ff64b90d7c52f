"""Quotes: rulebook sentences shown verbatim, with their section and page.

Every answer has them, whichever backend runs: they are what a player can check. They come
from one passage, the one that answers best (two for a "when can't I …?" question when two
ways of choosing disagree, `quoted_sentences`): the closest sentences of one passage carry
more of a rule than the closest of all passages, which mix neighbouring rules, and cite the
passage that holds it (`bench/quotes.py` compares the two). A quote is shown only when its
text is an exact substring of its passage, so nothing that reads as rule text can have been altered.
Passages are numbered [1], [2] … in the order their best sentence ranks; a passage's
sentences share its number and keep their reading order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from rag.answering.candidates import Sentence
from rag.answering.data import tuning
from rag.answering.question import Shape
from rag.types import Check, Citation, Hit, Quote


@dataclass(frozen=True)
class PassageChoice:
    """How the passage that answers best is chosen: by its `summed` closest sentences'
    similarities added up (a passage of fewer sentences adds fewer), plus `passage_weight`
    times the passage's own similarity with the question (retrieval's dense score) and
    `lexical_weight` times its keyword score relative to the best hit's, less `rank_penalty`
    per place it stands below retrieval's first. A passage that is one sentence counts it
    again at `lone_weight`. The weights are data: tuning.toml.

    Two sentences, not one: a rule is usually a condition and what follows from it, so a
    one-line glossary entry that merely echoes the question's words ("Test: Perform a
    Stealth test …") does not outrank the section that states it. Yet a one-sentence passage
    is often a definition that does answer ("Explore: You MAY draw a Map card …"), and
    adding nothing for its missing second sentence let it lose to any section with two
    fairly close ones."""

    summed: int
    passage_weight: float
    lexical_weight: float
    rank_penalty: float
    lone_weight: float

    def score(self, own: Sequence[Sentence], best_lexical: float) -> float:
        hit = own[0].hit
        lexical = (hit.lexical_score or 0.0) / best_lexical if best_lexical > 0 else 0.0
        lone = self.lone_weight * own[0].score if len(own) == 1 else 0.0
        return (
            sum(s.score for s in own[: self.summed])
            + lone
            + self.passage_weight * (hit.dense_score or 0.0)
            + self.lexical_weight * lexical
            - self.rank_penalty * own[0].passage
        )


_CHOICES = tuning("passage_choice")
BY_SENTENCES = PassageChoice(**_CHOICES["by_sentences"])
# The sentences, and the passage as a whole, its keywords and its place in retrieval's order:
# quotes the passage holding the rule at least as often as the sentences alone.
BY_SENTENCES_AND_PASSAGE = PassageChoice(**_CHOICES["by_sentences_and_passage"])
# How much of a sentence's closeness, for choosing its passage, is read under its section's
# name (the rest as it is written).
TITLED_SHARE: float = _CHOICES["reading"]["titled_share"]


def deciding_sentences(
    ranked: Sequence[Sentence], most: int, choice: PassageChoice = BY_SENTENCES_AND_PASSAGE
) -> list[Sentence]:
    """The closest `most` sentences (best first) of the passage that answers best by
    `choice`."""
    by_passage: dict[str, list[Sentence]] = {}
    for sentence in ranked:  # best first, so each passage's list is too
        by_passage.setdefault(sentence.hit.chunk.id, []).append(sentence)
    if not by_passage:
        return []
    best_lexical = max((own[0].hit.lexical_score or 0.0) for own in by_passage.values())
    best = max(by_passage.values(), key=lambda own: choice.score(own, best_lexical))
    return best[:most]


def quoted_sentences(
    shape: Shape,
    ranked: Sequence[Sentence],
    most: int,
    *,
    titled: Sequence[float],
    titled_share: float = TITLED_SHARE,
) -> list[Sentence]:
    """The `most` sentences an answer quotes, best first: those of the passage that answers
    best by its sentences and as a whole, each sentence's closeness taken partly as written
    (`ranked`'s scores) and `titled_share` of it read under its section's name (`titled`, in
    `ranked`'s order), where a sentence says what it is about ("If the roll is lower, …"
    under "Stealth").

    A question asking when something can't be done may be settled where the situation
    arises ("If you enter a tile … and DO NOT have any monster cards attached to you, you
    may attempt a stealth test") rather than in the thing's own section, which the passage
    as a whole, retrieval's order and a heading naming the thing favour. So when its
    sentences alone, as written, choose another passage, both are quoted, the closest half
    (rounded up) of that one: on questions of that shape, either choice alone misses rules
    that both together quote."""
    read = [
        replace(s, score=(1 - titled_share) * s.score + titled_share * t)
        for s, t in zip(ranked, titled, strict=True)
    ]
    written = {id(r): s for r, s in zip(read, ranked, strict=True)}
    read.sort(key=lambda s: s.score, reverse=True)
    best = [written[id(r)] for r in deciding_sentences(read, most)]
    if not best or not shape.when_not:
        return best
    by_sentences = deciding_sentences(ranked, most, BY_SENTENCES)
    if by_sentences[0].hit.chunk.id == best[0].hit.chunk.id:
        return best
    both = by_sentences[: most - most // 2] + best[: most // 2]
    return sorted(both, key=lambda s: s.score, reverse=True)


def is_verbatim(text: str, hit: Hit) -> bool:
    return bool(text.strip()) and text in hit.chunk.text


def make_quotes(
    sentences: Sequence[Sentence], deciding: Sentence | None = None
) -> tuple[list[Quote], Check]:
    """Quotes for the sentences, numbered by passage; any not verbatim in its passage is
    left out, and the check says so. The `deciding` sentence (one of them) comes first,
    marked, and its passage is [1]; the others follow by passage, in reading order."""
    ordered = list(sentences)
    if deciding is not None and deciding in ordered:
        ordered.remove(deciding)
        ordered.insert(0, deciding)
    numbers: dict[str, int] = {}
    kept: list[tuple[Sentence, int]] = []
    altered = 0
    for sentence in ordered:
        if not is_verbatim(sentence.text, sentence.hit):
            altered += 1
            continue
        n = numbers.setdefault(sentence.hit.chunk.id, len(numbers) + 1)
        kept.append((sentence, n))
    kept.sort(key=lambda pair: (pair[0] is not deciding, pair[1], pair[0].position))
    quotes = [
        Quote(
            n=n,
            chunk_id=s.hit.chunk.id,
            game=s.hit.chunk.game,
            section=s.hit.chunk.section_path,
            page=s.hit.chunk.page,
            text=s.text,
            deciding=s is deciding,
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
