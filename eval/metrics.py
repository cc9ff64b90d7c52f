"""Evaluation metrics over gold items and `ask` answers: pure functions, no models.

The definitions follow docs/eval-format.md. Empty denominators are reported as None
(JSON null), never 0: hit@k of a group without answerable items, or citation precision
when nothing was cited, was not measured, and a 0 would read as "everything failed".
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from rag.answering.checks import answer_word
from rag.lang import detect_lang, display_width
from rag.prompting import phrases
from rag.reading.glossary import Glossary, said_otherwise
from rag.types import LANGS, Lang, Quote

# Citation markers ([1], [1, 2], 【1】, [passage 1]) are not prose in either language.
_MARKER = re.compile(r"[\[【]\s*(?:passage\s*)?\d+(?:\s*[,，、]\s*\d+)*\s*[\]】]", re.I)
# A term's own word in the rulebook, in brackets after its rendering.
_BOOK_WORD = re.compile(r"\s?[(（][^()（）\n]{1,30}[)）]")
# Quoted rulebook text keeps the rulebook's language whatever the answer's language is.
_QUOTED = re.compile(r"“[^”]*”|「[^」]*」|『[^』]*』|\"[^\"\n]*\"|^[ \t]*>.*$", re.M)


# --- matching ---------------------------------------------------------------------------


def normalise(text: str) -> str:
    """Whitespace collapsed and case-folded, so line breaks and capitals never decide a match."""
    return " ".join(text.split()).casefold()


def contains_any(text: str, needles: Iterable[str]) -> bool:
    """Whether the text contains any needle (both normalised).

    An empty needle would be found in every text, so it never counts as found.
    """
    haystack = normalise(text)
    return any(needle and needle in haystack for needle in map(normalise, needles))


# Shorter shared text is a phrase, not a rule: "draw two cards" is in many sentences.
# Counted in columns: a Chinese character, about a word, takes two (抽两张牌 is as short a
# phrase as "draw two cards"; 如无「发」，可计清一色。 is a whole rule).
MIN_SHARED_COLUMNS = 15


def holds_evidence(sentence: str, evidence: Iterable[str]) -> bool:
    """Whether a quoted sentence holds gold evidence: it contains an evidence string, lies
    within one (evidence spanning several sentences), or shares with one a stretch of at
    least half the shorter of the two (evidence running across a sentence's end); never
    by fewer than MIN_SHARED_COLUMNS columns."""
    said = normalise(sentence)
    if not said:
        return False
    for needle in map(normalise, evidence):
        if not needle:
            continue
        if needle in said or (said in needle and display_width(said) >= MIN_SHARED_COLUMNS):
            return True
        match = SequenceMatcher(None, said, needle, autojunk=False).find_longest_match()
        shared = display_width(said[match.a : match.a + match.size])
        if shared >= max(MIN_SHARED_COLUMNS, min(display_width(said), display_width(needle)) / 2):
            return True
    return False


def first_hit_rank(passages: Sequence[str], evidence: Sequence[str]) -> int | None:
    """1-based rank of the first passage holding an evidence string; None when none does."""
    return next(
        (rank for rank, text in enumerate(passages, start=1) if contains_any(text, evidence)),
        None,
    )


def hit_at(rank: int | None, k: int) -> bool:
    return rank is not None and rank <= k


def reciprocal_rank(rank: int | None) -> float:
    return 0.0 if rank is None else 1.0 / rank


def facts_covered(answer: str, key_facts: Sequence[Sequence[str]]) -> tuple[bool, ...]:
    """Per key fact: does the answer state it in any of its alternative wordings?"""
    return tuple(contains_any(answer, alternatives) for alternatives in key_facts)


def abstention_correct(abstained: bool, answerable: bool) -> bool:
    return abstained == (not answerable)


def supported_citations(citation_texts: Iterable[str], evidence: Sequence[str]) -> int:
    """How many cited passages hold an evidence string."""
    return sum(contains_any(text, evidence) for text in citation_texts)


# --- the right way round (probe items: polarity, right_way, wrong_way) -------------------

PROBE_FIELDS = ("polarity", "right_way", "wrong_way")


def way_round_problems(conclusion: str, lang: Lang, probe: dict[str, Any]) -> list[str]:
    """Why a conclusion is not the right way round by the item's probe fields (none: it is):
    it opens with the expected yes or no, holds a right_way wording, and no wrong_way one."""
    problems = []
    if "polarity" in probe and answer_word(conclusion, lang) != probe["polarity"]:
        problems.append(f"does not open with {probe['polarity']!r}")
    if "right_way" in probe and not contains_any(conclusion, probe["right_way"]):
        problems.append("holds no right_way wording")
    wrong = [w for w in probe.get("wrong_way", []) if contains_any(conclusion, [w])]
    if wrong:
        problems.append(f"holds wrong_way wording {wrong}")
    return problems


# --- language ---------------------------------------------------------------------------


def _prose(text: str) -> str:
    """The text the answerer wrote itself: no markers, quotations, the book's own word for a
    term in brackets after it ("Seat Wind (门风刻)", 潜行判定（Stealth test）) or the fixed
    reminder.

    Answer assembly appends the reminder in the question's language to every answer, so
    leaving it in would make an English reply to a Chinese question look half Chinese.
    """
    for lang in LANGS:
        text = text.replace(phrases(lang)["reminder"], " ")
    return _BOOK_WORD.sub(" ", _QUOTED.sub(" ", _MARKER.sub(" ", text)))


def deciding_line(quotes: Sequence[Quote], asker: Lang) -> str | None:
    """What stands beside a deciding sentence in another language than the asker's: a
    checked "rendering", the glossary's "word_by_word" line, or "none"; None when there is
    no deciding sentence or it is in the asker's language."""
    deciding = next((q for q in quotes if q.deciding), None)
    if deciding is None or detect_lang(deciding.text) == asker:
        return None
    if deciding.rendering:
        return "rendering"
    return "word_by_word" if deciding.word_by_word else "none"


def terms_rendered_otherwise(quotes: Sequence[Quote], glossary: Glossary | None) -> int:
    """The glossary terms that a shown rendering names otherwise than the glossary renders
    them, each counted once: a term said two ways within one answer."""
    if glossary is None:
        return 0
    otherwise = {
        term.original
        for quote in quotes
        if quote.rendering
        for term in said_otherwise(glossary.used_in([quote.text]), quote.rendering, glossary.into)
    }
    return len(otherwise)


def answer_language(text: str) -> Lang:
    """The language the answer is written in, judged as questions are (detect_lang), on its
    prose alone: an answer in Chinese that quotes English rules is still Chinese.

    Text without letters (empty, only markers or digits) is "en": it is not Chinese.
    """
    return detect_lang(_prose(text))


# --- aggregation ------------------------------------------------------------------------


def ratio(numerator: float, denominator: float) -> float | None:
    return None if denominator == 0 else numerator / denominator


def share(flags: Sequence[bool]) -> float | None:
    return ratio(sum(flags), len(flags))


def mean(values: Sequence[float]) -> float | None:
    return ratio(sum(values), len(values))


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100), interpolating linearly between the nearest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class ItemScore:
    """One gold item's outcome, the aggregation's only input.

    The defaults describe a failed item (no answer): no hit, no fact covered, a wrong
    abstention and a wrong language, so a failure counts against every rate it is part of.
    """

    lang: Lang
    game: str  # the resolved slug, or the runner's placeholder when resolution failed
    type: str
    answerable: bool
    first_hit: int | None = None
    facts: tuple[bool, ...] = ()
    abstained_ok: bool = False
    citations: int = 0
    supported: int = 0  # citations whose passage holds evidence
    answer_lang: Lang | None = None
    latency_s: float | None = None  # None when no answer was produced
    error: str | None = None
    concluded: bool = False  # a checked conclusion was shown
    right_way: bool | None = None  # probe items with a conclusion shown: the right way round?
    probe: bool = False  # the item has probe fields
    invented_number: bool = False  # the shown conclusion states or counts numbers unlike quotes
    renderings_shown: int = 0  # quotes shown with a rendering in the asker's language
    renderings_withheld: int = 0  # quotes whose rendering failed the checks
    deciding_holds: bool | None = None  # answerable: the sentence shown first holds evidence
    conclusion_right: bool | None = None  # a conclusion shown: it covers a key fact and its
    # deciding sentence holds evidence (for an unanswerable item, never)
    # A deciding sentence in another language than the question's: what stands beside it
    # ("rendering", "word_by_word" or "none"); None when it is in the asker's language.
    deciding_line: str | None = None
    terms_otherwise: int = 0  # glossary terms a shown rendering names otherwise

    @property
    def fact_recall(self) -> float | None:
        """None for an item without key facts: it has nothing to cover."""
        return share(self.facts)

    @property
    def lang_ok(self) -> bool:
        return self.answer_lang == self.lang

    def to_json(self, ks: Sequence[int]) -> dict[str, Any]:
        """Per-item metrics; retrieval ones are None for unanswerable items (not measured)."""
        retrieval: dict[str, Any] = {
            f"hit@{k}": hit_at(self.first_hit, k) if self.answerable else None
            for k in sorted(set(ks))
        }
        return {
            "game": self.game,
            "first_hit_rank": self.first_hit,
            **retrieval,
            "reciprocal_rank": reciprocal_rank(self.first_hit) if self.answerable else None,
            "key_facts_covered": list(self.facts),
            "key_fact_recall": self.fact_recall,
            "abstention_correct": self.abstained_ok,
            "citations": self.citations,
            "citations_supported": self.supported,
            "answer_lang": self.answer_lang,
            "language_match": self.lang_ok,
            "latency_s": self.latency_s,
            "error": self.error,
            "conclusion_shown": self.concluded,
            "right_way_round": self.right_way,
            "invented_number": self.invented_number,
            "renderings_shown": self.renderings_shown,
            "renderings_withheld": self.renderings_withheld,
            "deciding_holds_evidence": self.deciding_holds,
            "conclusion_right": self.conclusion_right,
            "deciding_line": self.deciding_line,
            "terms_rendered_otherwise": self.terms_otherwise,
        }


def _rounded(values: dict[str, float | None]) -> dict[str, float | None]:
    return {key: None if v is None else round(v, 4) for key, v in values.items()}


def summarise(scores: Sequence[ItemScore], ks: Sequence[int] = (1, 5)) -> dict[str, Any]:
    """n, errors, retrieval, answer and latency figures of one group of items.

    Retrieval, key-fact recall and citation precision are over answerable items only;
    abstention accuracy and language match over all items; latency over items answered.
    """
    answerable = [s for s in scores if s.answerable]
    retrieval = {
        f"hit@{k}": share([hit_at(s.first_hit, k) for s in answerable]) for k in sorted(set(ks))
    }
    retrieval["mrr"] = mean([reciprocal_rank(s.first_hit) for s in answerable])
    recalls = [s.fact_recall for s in answerable]
    answer = {
        "key_fact_recall": mean([r for r in recalls if r is not None]),
        "abstention_accuracy": share([s.abstained_ok for s in scores]),
        "citation_precision": ratio(
            sum(s.supported for s in answerable), sum(s.citations for s in answerable)
        ),
        "language_match": share([s.lang_ok for s in scores]),
        # The share of answerable items with a checked conclusion shown, and of probe items'
        # shown conclusions that are the right way round (a withheld one is neither).
        "conclusion_shown": share([s.concluded for s in answerable]),
        # The sentence a player reads first, and the conclusions shown that are right.
        "deciding_holds_evidence": share([bool(s.deciding_holds) for s in answerable]),
        "conclusion_right": share(
            [s.conclusion_right for s in scores if s.conclusion_right is not None]
        ),
        "right_way_round": share([s.right_way for s in scores if s.right_way is not None]),
        "probe_conclusion_shown": share([s.concluded for s in scores if s.probe]),
        "invented_numbers_shown": sum(s.invented_number for s in scores),
        # Renderings beside quotes, and those made but withheld by the checks: how a change
        # to rendering or its checks moves what a player in another language can read.
        "renderings_shown": sum(s.renderings_shown for s in scores),
        "renderings_withheld": sum(s.renderings_withheld for s in scores),
        # A deciding sentence in the book's language shown to an asker in the other: with a
        # checked rendering beside it, or with only the glossary's word-by-word line.
        "deciding_rendered": share(
            [s.deciding_line == "rendering" for s in scores if s.deciding_line is not None]
        ),
        "deciding_word_by_word": share(
            [s.deciding_line == "word_by_word" for s in scores if s.deciding_line is not None]
        ),
        "terms_rendered_otherwise": sum(s.terms_otherwise for s in scores),
    }
    latencies = [s.latency_s for s in scores if s.latency_s is not None]
    latency = {"p50_s": percentile(latencies, 50), "p95_s": percentile(latencies, 95)}
    return {
        "n": len(scores),
        "errors": sum(s.error is not None for s in scores),
        "retrieval": _rounded(retrieval),
        "answer": _rounded(answer),
        "latency": _rounded(latency),
    }


def _grouped(
    scores: Sequence[ItemScore],
    key: Callable[[ItemScore], str],
    ks: Sequence[int],
    always: Sequence[str] = (),
) -> dict[str, dict[str, Any]]:
    """summarise() per group; groups in `always` appear even when empty (with nulls)."""
    groups: dict[str, list[ItemScore]] = {name: [] for name in always}
    for score in scores:
        groups.setdefault(key(score), []).append(score)
    ordered = [*always, *sorted(set(groups) - set(always))]
    return {name: summarise(groups[name], ks) for name in ordered}


def build_report(scores: Sequence[ItemScore], ks: Sequence[int] = (1, 5)) -> dict[str, Any]:
    """The `rules eval --json` report: overall figures plus by_lang, by_game and by_type.

    by_lang always holds "en" and "zh", so readers can index it without checking.
    """
    ks = [1, 5, *ks]  # the contract's hit@1 and hit@5 whatever else is asked for
    return {
        **summarise(scores, ks),
        "by_lang": _grouped(scores, lambda s: s.lang, ks, always=LANGS),
        "by_game": _grouped(scores, lambda s: s.game, ks),
        "by_type": _grouped(scores, lambda s: s.type, ks),
    }
