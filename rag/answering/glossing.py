"""Glosses: Chinese text keeps the rulebook's English word for a game term in brackets the
first time it names it (潜行判定（Stealth test）), so a player can find the term on the cards
and in the rule text, which stay in English. The conclusion shown is glossed by the terms of
the quotes it rests on, then the renderings beside the quotes, each by its own quote's. Only
what is shown is glossed: the model reads the renderings as they were made (conclusions
written from glossed renderings fail their checks more often).

The small model seldom writes these brackets itself, and asked to name a Chinese word for
each term it paired "Rest" with 重新抽取. So no model is asked: the game's terms are its
headings and glossary entries, those that the text's quotes use are candidates, and its
phrases (jieba's words, up to three together) are compared
with them by the multilingual embedder that retrieval uses. A term and a phrase are paired
when each is the other's closest and they are close enough, so that a phrase merely near
a term is not taken for it; the bracket goes after the phrase's first appearance.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from rag.answering.data import words
from rag.lang import ENGLISH_GLOSS, STOPWORDS, chinese_words
from rag.searching.embedding import Embedder
from rag.types import Check, Chunk

# A heading's numbering ("3. Player Actions", "Step 2:"), and what a parenthesis adds
# ("Wire Cutter Token (or card)").
_NUMBERING = re.compile(r"^\s*(?:(?:step|phase)\s+)?(?:\d+|[A-Z])[.:)]\s+", re.IGNORECASE)
_ARTICLE = re.compile(r"^(?:the|a|an)\s+", re.IGNORECASE)  # "THE MAP" names the map
_PARENTHESIS = re.compile(r"\s*[(（][^)）]*[)）]")
_LATIN_TERM = re.compile(r"[A-Za-z][A-Za-z' -]*[A-Za-z]")
_MOST_TERM_WORDS = 3
# A phrase is up to three of jieba's words together, two to six characters, all Chinese.
_PHRASE_WORDS = 3
_CHINESE_PHRASE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]{2,6}")
# Particles and the like do not begin or end a term (附着了 is 附着 done).
_NOT_AT_THE_EDGE = frozenset(words("zh")["not_at_phrase_edge"])  # one character each
# A bracket of English after a phrase glosses it already; （见下文） does not.
_GLOSSED_ALREADY = re.compile(r"\s*" + ENGLISH_GLOSS.pattern)


@dataclass(frozen=True)
class Gloss:
    term: str  # as the rulebook writes it in a heading or glossary entry
    phrase: str  # the Chinese text's words for it
    score: float  # their cosine similarity


def game_terms(chunks: Iterable[Chunk]) -> list[str]:
    """A rulebook's game terms: its headings and glossary entries that read as a name (one
    to three words, no digits, no function words: "Stealth test", "Docile", not "Overview of
    a round"), each once."""
    terms: dict[str, str] = {}
    for chunk in chunks:
        for heading in chunk.section[1:]:  # the first is the game's title
            term = _ARTICLE.sub("", _PARENTHESIS.sub("", _NUMBERING.sub("", heading)).strip())
            if _is_term(term):
                terms.setdefault(term.casefold(), term)
    return list(terms.values())


def _is_term(text: str) -> bool:
    """A name, not a procedure: "Encountering monster tokens" and "Equipping Gear" head the
    rule for a situation, and pair with a phrase for the situation, such as 带有怪物标记
    (with monster tokens)."""
    words = text.split()
    return (
        _LATIN_TERM.fullmatch(text) is not None
        and 1 <= len(words) <= _MOST_TERM_WORDS
        and len(text) >= 3
        and not (len(words) > 1 and words[0].casefold().endswith("ing"))
        and not any(w.casefold() in STOPWORDS for w in words)
    )


def terms_used(terms: Sequence[str], sources: Sequence[str]) -> list[str]:
    """The terms that the sources use (as words, singular or plural, in any case), longest
    first; a term used only inside a longer one is not ("Test" in "stealth test")."""
    text = " ".join(sources)
    used = []
    for term in sorted(terms, key=len, reverse=True):
        found = re.compile(rf"\b{re.escape(term)}(?:s|es)?\b", re.IGNORECASE)
        if found.search(text):
            used.append(term)
            text = found.sub(" | ", text)  # what a longer term used is not there for a shorter
    return used


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
    def __init__(
        self,
        embedder: Embedder,
        chunks_of: Callable[[str], Sequence[Chunk]],
        min_score: float,
    ) -> None:
        self.embedder = embedder
        self.chunks_of = chunks_of  # a game's chunks in the current index
        self.min_score = min_score

    def gloss(
        self, texts: Sequence[str], sources: Sequence[Sequence[str]], game: str
    ) -> tuple[list[str], Check]:
        """The texts (Chinese, in the order a player reads them) with the English term after
        the first appearance of each phrase paired with one of the game's terms that the
        text's sources (the English quotes it renders or rests on) use, each term once; the
        check lists the pairs placed. All the texts are compared in one call to the
        embedder."""
        if self.min_score >= 1:
            return list(texts), Check("glosses", True, "off (generation.min_gloss_score is 1)")
        book = game_terms(self.chunks_of(game))
        # per text: the terms its sources use that it does not already write in English,
        # and its phrases (none needed where no term is)
        wanted = []
        for text, own in zip(texts, sources, strict=True):
            terms = [t for t in terms_used(book, own) if t.casefold() not in text.casefold()]
            wanted.append((text, terms, chinese_phrases(text) if terms else []))
        terms_lower = {t.lower() for _, terms, _ in wanted for t in terms}
        vectors = self._vectors(terms_lower | {p for _, _, phrases in wanted for p in phrases})
        glossed: list[str] = []
        placed: list[Gloss] = []
        for text, terms, phrases in wanted:
            pairs = self._pairs(terms, phrases, vectors)
            done = {g.term for g in placed}  # "the first time": not again in a later text
            text, put = _bracketed(text, [g for g in pairs if g.term not in done])
            glossed.append(text)
            placed += put
        detail = "; ".join(f"{g.phrase} = {g.term} ({g.score:.2f})" for g in placed)
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


def _bracketed(text: str, pairs: Sequence[Gloss]) -> tuple[str, list[Gloss]]:
    """The text with "（term）" after each pair's phrase where it first appears, best pairs
    first, and the pairs so placed; a phrase overlapping one glossed already, or bracketed
    by the writer, is left."""
    taken: list[tuple[int, int]] = []
    inserts: list[tuple[int, str]] = []
    placed: list[Gloss] = []
    for gloss in sorted(pairs, key=lambda g: g.score, reverse=True):
        start = text.find(gloss.phrase)
        end = start + len(gloss.phrase)
        if start < 0 or _GLOSSED_ALREADY.match(text, end):
            continue
        if any(start < b and a < end for a, b in taken):
            continue
        taken.append((start, end))
        inserts.append((end, f"（{gloss.term}）"))
        placed.append(gloss)
    for end, bracket in sorted(inserts, reverse=True):
        text = text[:end] + bracket + text[end:]
    return text, placed
