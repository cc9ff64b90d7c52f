"""Glosses: a rendering or conclusion in the other language than the rulebook's keeps the
rulebook's own word for a game term in brackets the first time it names it, so a player can
find the term on the cards and in the rule text: 潜行判定（Stealth test） in a Chinese answer
on an English book, "general card (武将牌)" in an English answer on a Chinese book. The
conclusion shown and the renderings beside the quotes are glossed in the order a player
reads them, each by the terms its own sources (the quotes it renders or rests on) use. Only
what is shown is glossed: the model reads the renderings as they were made (conclusions
written from glossed renderings fail their checks more often).

The terms are the book's glossary (rag.reading.glossary). A term the glossary renders is
found by that rendering: a rendering naming it otherwise is not shown (rendering's checks).
A term it does not render yet (a built-in book's, whose glossary is drawn up from its
headings when asked) is found in a Chinese text as no model is asked to: the small model
seldom writes the brackets itself, and asked to name a Chinese word for each term it paired
"Rest" with 重新抽取. So the text's phrases (jieba's words, up to three together) are
compared with the terms its sources use by the multilingual embedder that retrieval uses; a
term and a phrase are paired when each is the other's closest and they are close enough, so
that a phrase merely near a term is not taken for it.

When no rendering of a sentence passes its checks, `word_by_word` says the sentence's terms
and rule words as the glossary and the word lists render them, in its order: no model wrote
it, and it is labelled as no translation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rag.answering.data import words
from rag.lang import CJK_RE, ENGLISH_GLOSS, chinese_words
from rag.reading.glossary import Glossary, Term, term_pattern, term_span
from rag.searching.embedding import Embedder
from rag.types import Check, Lang

# A phrase is up to three of jieba's words together, two to six characters, all Chinese.
_PHRASE_WORDS = 3
_CHINESE_PHRASE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]{2,6}")
# Particles and the like do not begin or end a term (附着了 is 附着 done).
_NOT_AT_THE_EDGE = frozenset(words("zh")["not_at_phrase_edge"])  # one character each
# A bracket right after a phrase, which glosses it already when it holds the rulebook's
# language (（见下文） after a Chinese phrase does not).
_BRACKET_AFTER = re.compile(r"\s*[（(]([^（）()]*)[）)]")
# What stands for the words of a sentence a word-by-word line has none for.
_GAP = "…"
# A number, as a word-by-word line keeps it.
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class Gloss:
    term: str  # as the rulebook writes it
    phrase: str  # the text's words for it
    score: float  # their cosine similarity; 1 for the glossary's own rendering
    fixed: bool = False  # the phrase is the glossary's rendering of the term


def chinese_phrases(text: str) -> list[str]:
    """The text's candidate phrases for a term, each once, in reading order."""
    words = chinese_words(text)
    phrases: dict[str, None] = {}
    for start in range(len(words)):
        if words[start] in _NOT_AT_THE_EDGE:
            continue
        joined = ""
        for word in words[start : start + _PHRASE_WORDS]:
            joined += word
            if word not in _NOT_AT_THE_EDGE and _CHINESE_PHRASE.fullmatch(joined):
                phrases.setdefault(joined)
    return list(phrases)


class Glosser:
    def __init__(self, embedder: Embedder, min_score: float) -> None:
        self.embedder = embedder
        self.min_score = min_score  # for a term the glossary does not render yet

    def gloss(
        self, texts: Sequence[str], sources: Sequence[Sequence[str]], glossary: Glossary
    ) -> tuple[list[str], Check]:
        """The texts (in the glossary's other language, in the order a player reads them)
        with the rulebook's word after the first appearance of each term that the text's
        sources use, each term once; the check lists the pairs placed. Terms the glossary
        does not render are paired with a Chinese text's phrases in one call to the
        embedder."""
        if self.min_score >= 1:
            return list(texts), Check("glosses", True, "off (generation.min_gloss_score is 1)")
        into = glossary.into
        # per text: the terms its sources use that it does not already write in the
        # rulebook's words, and (for terms without a rendering) its phrases
        wanted = []
        for text, own in zip(texts, sources, strict=True):
            terms = [
                t
                for t in glossary.used_in(own)
                if not term_pattern(t.original, glossary.lang).search(text)
            ]
            pairing = into == "zh" and any(t.rendering is None for t in terms)
            wanted.append((text, terms, chinese_phrases(text) if pairing else []))
        unrendered = {
            t.original.lower() for _, terms, _ in wanted for t in terms if not t.rendering
        }
        phrases = {p for _, _, found in wanted for p in found}
        vectors = self._vectors(unrendered | phrases) if unrendered and phrases else {}
        glossed: list[str] = []
        placed: list[Gloss] = []
        for text, terms, found in wanted:
            done = {g.term for g in placed}  # "the first time": not again in a later text
            fresh = [t for t in terms if t.original not in done]
            pairs = _fixed(text, [t for t in fresh if t.rendering], into) + self._pairs(
                [t.original for t in fresh if not t.rendering], found, vectors
            )
            text, put = _bracketed(text, pairs, glossary.lang)
            glossed.append(text)
            placed += put
        detail = "; ".join(
            f"{g.phrase} = {g.term} ({'glossary' if g.fixed else f'{g.score:.2f}'})" for g in placed
        )
        return glossed, Check("glosses", True, detail or "no term paired")

    def _vectors(self, texts: set[str]) -> dict[str, np.ndarray]:
        """Each text's vector, all from one call to the embedder."""
        ordered = sorted(texts)
        return dict(zip(ordered, self.embedder.embed_queries(ordered), strict=True))

    def _pairs(
        self, terms: Sequence[str], phrases: Sequence[str], vectors: dict[str, np.ndarray]
    ) -> list[Gloss]:
        """Each term and phrase that are each other's closest, at least `min_score` alike.
        Terms are compared in lower case: "WEAK SPOTS" in capitals sat further from 弱点."""
        if not terms or not phrases:
            return []
        similarity = (
            np.stack([vectors[t.lower()] for t in terms])
            @ np.stack([vectors[p] for p in phrases]).T
        )
        pairs = []
        for i, term in enumerate(terms):
            j = int(similarity[i].argmax())
            score = float(similarity[i, j])
            if score >= self.min_score and int(similarity[:, j].argmax()) == i:
                pairs.append(Gloss(term, phrases[j], score))
        return pairs


def _fixed(text: str, terms: Sequence[Term], into: Lang) -> list[Gloss]:
    """The terms whose glossary rendering the text writes, each at its first appearance."""
    pairs = []
    for term in terms:
        assert term.rendering is not None
        found = term_span(text, term.rendering, into)
        if found:
            pairs.append(Gloss(term.original, text[slice(*found)], 1.0, fixed=True))
    return pairs


def _glossed_already(text: str, end: int, book: Lang) -> bool:
    """Whether a bracket in the rulebook's language follows the phrase ending at `end`."""
    bracket = _BRACKET_AFTER.match(text, end)
    if bracket is None:
        return False
    if book == "en":
        return ENGLISH_GLOSS.fullmatch(bracket.group().strip()) is not None
    return CJK_RE.search(bracket.group(1)) is not None


def _bracketed(text: str, pairs: Sequence[Gloss], book: Lang) -> tuple[str, list[Gloss]]:
    """The text with the term in brackets after each pair's phrase where it first appears
    (（Stealth test） in Chinese, " (武将牌)" in English), the glossary's renderings and then
    the best pairs first, and the pairs so placed; a phrase overlapping one glossed
    already, or bracketed by the writer, is left."""
    taken: list[tuple[int, int]] = []
    inserts: list[tuple[int, str]] = []
    placed: list[Gloss] = []
    for gloss in sorted(pairs, key=lambda g: (g.fixed, g.score), reverse=True):
        start = text.find(gloss.phrase)
        end = start + len(gloss.phrase)
        if start < 0 or _glossed_already(text, end, book):
            continue
        if any(start < b and a < end for a, b in taken):
            continue
        taken.append((start, end))
        inserts.append((end, f"（{gloss.term}）" if book == "en" else f" ({gloss.term})"))
        placed.append(gloss)
    for end, bracket in sorted(inserts, reverse=True):
        text = text[:end] + bracket + text[end:]
    return text, placed


def word_by_word(text: str, glossary: Glossary) -> str | None:
    """A rulebook sentence word by word in the glossary's other language: its terms as the
    glossary renders them, its rule words as the word lists do (words/<lang>.toml,
    `word_by_word`), its numbers as they are, in the sentence's order, "…" where it says
    more; None when the glossary renders none of its terms (it would say nothing of the
    rule)."""
    rule_words = words(glossary.lang)["word_by_word"]
    found: list[tuple[int, int, str, bool]] = []  # start, end, said, a term
    for term in sorted(
        (t for t in glossary.terms if t.rendering), key=lambda t: len(t.original), reverse=True
    ):
        assert term.rendering is not None
        _take(found, term_pattern(term.original, glossary.lang), text, term.rendering, True)
    for word in sorted(rule_words, key=len, reverse=True):
        _take(found, term_pattern(word, glossary.lang), text, rule_words[word], False)
    _take(found, _DIGITS, text, None, False)
    if not any(term for *_, term in found):
        return None
    said: list[str] = []
    at = 0
    for start, end, words_for, _ in sorted(found):
        if _has_words(text[at:start]) and (not said or said[-1] != _GAP):
            said.append(_GAP)
        said.append(words_for)
        at = end
    if _has_words(text[at:]):
        said.append(_GAP)
    return (" " if glossary.into == "en" else "").join(said)


def _take(
    found: list[tuple[int, int, str, bool]],
    pattern: re.Pattern[str],
    text: str,
    said: str | None,
    term: bool,
) -> None:
    """Add where `pattern` stands in `text` and what is said for it (None: the match
    itself) to `found`, where nothing found already stands."""
    for match in pattern.finditer(text):
        start, end = match.span()
        if not any(start < b and a < end for a, b, *_ in found):
            found.append((start, end, match.group() if said is None else said, term))


def _has_words(text: str) -> bool:
    return bool(CJK_RE.search(text) or re.search(r"[A-Za-z]", text))
