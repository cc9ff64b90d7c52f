"""A rulebook's glossary: the game terms it defines or repeats (names of cards, zones,
phases, tokens), each with one fixed rendering in the other language, so that every
rendering and conclusion names a term one way and a player can find it in the book.

Drawn up when a book is added (`draw_up`) from what the book itself marks as its terms:
headings that read as names, glossary entries and, in a Chinese book, the terms it puts in
「」 or 『』 and the nouns it repeats. A heading that names its term in both languages
("大四喜 Big Four Winds", "基本分（Life Point）") gives the rendering too; the model renders
the others once (rag.answering.rendering), and they are kept with the book
(`write_glossary`), so that no answer renders a term another way.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from rag.lang import CJK_RE, STOPWORDS, detect_lang, split_sentences, tagged_chinese_words
from rag.reading.numbering import without_numbering
from rag.types import LANGS, Chunk, Lang

GLOSSARY_FILE = "glossary.json"
By = Literal["book", "model"]

# A heading's numbering ("3. Player Actions", "Step 2:", "A. Card Type"; "1. 主怪兽区域"
# and "1、摸牌"); Chinese numbering (第一章, 一、, （一）) is numbering's.
_NUMBERING = {
    "en": re.compile(r"^\s*(?:(?:step|phase)\s+)?(?:\d+|[A-Z])[.:)]\s+", re.IGNORECASE),
    "zh": re.compile(r"^\s*\d+[.:)、．]\s*"),
}
_ARTICLE = re.compile(r"^(?:the|a|an)\s+", re.IGNORECASE)  # "THE MAP" names the map
# What a bracket adds ("Wire Cutter Token (or card)"); one in the other language renders it.
_BRACKET = re.compile(r"\s*[(（]([^)）]*)[)）]")
_LATIN_TERM = re.compile(r"[A-Za-z][A-Za-z' -]*[A-Za-z]")
_CHINESE_TERM = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fffA-Za-z0-9&·・-]+")
# A heading naming its term in Chinese, then in English: "大四喜 Big Four Winds".
_BOTH_ZH_FIRST = re.compile(r"(\S*[\u3400-\u4dbf\u4e00-\u9fff]\S*)\s+([A-Za-z][^\u3400-\u9fff]*)")
_BOTH_EN_FIRST = re.compile(r"([A-Za-z][^\u3400-\u9fff]*?)\s+(\S*[\u3400-\u4dbf\u4e00-\u9fff]\S*)")
_QUOTED = re.compile(r"[「『]([^「」『』]+)[」』]")
# A rendering the book gives may be longer than a term it draws up ("Freedom to Choose the
# Highest Points"), but not a sentence.
_MOST_GIVEN_WORDS = 8


@cache
def _settings() -> dict[str, Any]:
    text = resources.files("rag.reading").joinpath("glossary.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def other_lang(lang: Lang) -> Lang:
    """The language a rulebook in `lang` is rendered into."""
    return next(other for other in LANGS if other != lang)


@dataclass(frozen=True)
class Term:
    """One of a rulebook's game terms."""

    original: str  # as the rulebook writes it
    rendering: str | None = None  # its one rendering in the other language, once made
    # who rendered it: the book itself or the model (which may have made nothing fit to
    # keep: its rendering is None); None: not yet asked
    by: By | None = None
    seen_in: str = ""  # the first sentence of the book that uses it: the model's context


@dataclass(frozen=True)
class Glossary:
    """A rulebook's terms, in its language `lang`, with their renderings into the other."""

    lang: Lang
    terms: tuple[Term, ...] = ()

    @property
    def into(self) -> Lang:
        return other_lang(self.lang)

    def used_in(self, texts: Sequence[str]) -> list[Term]:
        """The terms the texts use (a Latin word singular or plural, in any case), longest
        first; a term used only inside a longer one is not ("Test" in "stealth test", 怪兽
        in 怪兽区域)."""
        text = " ".join(texts)
        used = []
        for term in sorted(self.terms, key=lambda t: len(t.original), reverse=True):
            found = term_pattern(term.original, self.lang)
            if found.search(text):
                used.append(term)
                text = found.sub(" | ", text)  # what a longer term used is not there for a shorter
        return used

    def named_in(self, text: str) -> list[Term]:
        """The terms a text in the other language names as the glossary renders them
        ("Big Four Winds" names 大四喜), longest rendering first; a rendering only inside a
        longer one named is not."""
        named = []
        rendered = sorted(
            (t for t in self.terms if t.rendering), key=lambda t: -len(t.rendering or "")
        )
        for term in rendered:
            span = term_span(text, term.rendering or "", self.into)
            if span:
                named.append(term)
                text = f"{text[: span[0]]} | {text[span[1] :]}"
        return named

    def unasked(self) -> list[Term]:
        """The terms neither the book nor the model has rendered yet."""
        return [t for t in self.terms if t.by is None]

    def with_renderings(self, made: Mapping[str, str | None]) -> Glossary:
        """The glossary with what the model made of the terms asked (original ->
        rendering; None: none that reads as a term's name, and it is not asked again)."""
        return replace(
            self,
            terms=tuple(
                replace(t, rendering=made[t.original], by="model")
                if t.by is None and t.original in made
                else t
                for t in self.terms
            ),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "lang": self.lang,
            "terms": [
                {"term": t.original, "rendering": t.rendering, "by": t.by, "seen_in": t.seen_in}
                for t in self.terms
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Glossary:
        terms = tuple(
            Term(t["term"], t.get("rendering"), t.get("by"), t.get("seen_in", ""))
            for t in data["terms"]
        )
        return cls(data["lang"], terms)


# An English word's endings that make another form of it ("draw", "draws", "drawing",
# "normally"): taken off (all but "ly", which would take "Ally" for "Al"), then allowed back.
_ENDING = re.compile(r"(?:ing|ed|es|s|e)$", re.IGNORECASE)
_ENDINGS = "(?:ing|ed|es|s|e|d|ly)?"
_SHORTEST_STEM = 3
_LATIN_WORD = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?")
# Words a term's rendering may put between its own when it is said another way round ("cards
# in their hand" for "Hand Card"): at most this many.
_MOST_BETWEEN = 3


def _word_form(word: str) -> str:
    """A pattern for an English word in any of its forms."""
    stem = _ENDING.sub("", word)
    stem = stem if len(stem) >= _SHORTEST_STEM else word
    return re.escape(stem) + (_ENDINGS if word[-1:].isalpha() else "")


@cache
def term_pattern(text: str, lang: Lang) -> re.Pattern[str]:
    """Where a term (or a rendering of one) in `lang` stands in a text, as written. Latin
    words match in any case and in any of their forms ("Draw card" in "drawing cards"),
    bounded by letters (a Chinese character beside one bounds it too), a space or a hyphen
    between them; Chinese matches as written."""
    if lang == "zh":
        return re.compile(re.escape(text), re.IGNORECASE)
    joined = r"[\s-]+".join(_word_form(w) for w in re.split(r"[\s-]+", text.strip()))
    return re.compile(rf"(?<![A-Za-z]){joined}(?![A-Za-z])", re.IGNORECASE)


def term_span(text: str, rendering: str, lang: Lang) -> tuple[int, int] | None:
    """Where a text says a term as the glossary renders it (`rendering`, in `lang`): the
    rendering as written, else (English) all its words in any order and form, close
    together ("cards in their hand" says "Hand Card", "summoned normally" "Normal
    Summon"); None when it does not ("martial arts cards" is no "general card")."""
    found = term_pattern(rendering, lang).search(text)
    if found:
        return found.span()
    if lang == "zh":
        return None
    wanted = [w for w in _LATIN_WORD.findall(rendering) if w.casefold() not in STOPWORDS]
    forms = [re.compile(_word_form(w), re.IGNORECASE) for w in wanted]
    words = list(_LATIN_WORD.finditer(text))
    for start, first in enumerate(words):
        if not any(form.fullmatch(first.group()) for form in forms):
            continue
        window = words[start : start + len(forms) + _MOST_BETWEEN]
        hits = [next((w for w in window if form.fullmatch(w.group())), None) for form in forms]
        if forms and all(hits):
            return first.start(), max(hit.end() for hit in hits if hit)
    return None


def said_otherwise(terms: Sequence[Term], text: str, lang: Lang) -> list[Term]:
    """The terms with a fixed rendering that a text in `lang` (a rendering of a sentence
    using them) does not name as the glossary renders them."""
    return [t for t in terms if t.rendering and term_span(text, t.rendering, lang) is None]


def read_glossary(folder: Path) -> Glossary | None:
    """The glossary kept in a book's folder, if it has one."""
    try:
        data = json.loads((folder / GLOSSARY_FILE).read_text(encoding="utf-8"))
        return Glossary.from_json(data)
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return None  # a damaged file costs the fixed renderings, not the book


def glossary_stamp(folder: Path) -> int | None:
    """When the glossary kept in a book's folder last changed (None: it has none)."""
    try:
        return (folder / GLOSSARY_FILE).stat().st_mtime_ns
    except FileNotFoundError:
        return None


def write_glossary(folder: Path, glossary: Glossary) -> None:
    """Keep the glossary in a book's folder, whole: written aside and moved in, so that a
    process reading it meanwhile reads the one before."""
    text = json.dumps(glossary.to_json(), ensure_ascii=False, indent=1)
    aside = folder / f".{GLOSSARY_FILE}.{os.getpid()}"
    aside.write_text(text + "\n", encoding="utf-8")
    os.replace(aside, folder / GLOSSARY_FILE)


# --- drawing up ------------------------------------------------------------------------


def draw_up(chunks: Sequence[Chunk], lang: Lang) -> Glossary:
    """The glossary of a rulebook in `lang` read into `chunks`: its terms (none rendered by
    the model yet), each once whatever its case: the headings' in reading order, then the
    nouns it repeats and the terms it quotes, most frequent first."""
    found: dict[str, Term] = {}
    for heading in _headings(chunks):
        term, given = _heading_term(heading, lang)
        if term and term.casefold() not in found:
            found[term.casefold()] = Term(term, given, "book" if given else None)
    if lang == "zh":
        text = "\n".join(chunk.text for chunk in chunks)
        for term in _defined_terms(text):
            found.setdefault(term.casefold(), Term(term))
        # a word inside a name the book quotes (飞狮 of 「幻兽机 猎户座飞狮」) is part of it
        names = [*(t.original for t in found.values()), *set(_QUOTED.findall(text))]
        for term in [*_frequent_nouns(text, names), *_quoted_terms(text)]:
            found.setdefault(term.casefold(), Term(term))
    # A heading no sentence of the book uses ("Credits", 规则变动) is no term of its rules.
    used = [term for term in _seen_in(list(found.values()), chunks, lang) if term.seen_in]
    return Glossary(lang, tuple(used[: _settings()["most_terms"]]))


def _headings(chunks: Iterable[Chunk]) -> list[str]:
    """Every heading of the chunks' section paths, in reading order, each once (the first
    of a path is the game's title)."""
    return list(dict.fromkeys(heading for chunk in chunks for heading in chunk.section[1:]))


def _heading_term(heading: str, lang: Lang) -> tuple[str | None, str | None]:
    """The term a heading names, if it reads as a name, and the rendering it gives."""
    text = _NUMBERING[lang].sub("", without_numbering(heading) if lang == "zh" else heading)
    asides = _BRACKET.findall(text)
    text = _BRACKET.sub("", text).strip()
    both = (_BOTH_ZH_FIRST if lang == "zh" else _BOTH_EN_FIRST).fullmatch(text)
    if both:
        text, asides = both[1], [both[2], *asides]
    given = next((a for a in map(_given, asides) if a and detect_lang(a) != lang), None)
    text = _ARTICLE.sub("", text.strip())
    return (text if _is_term(text, lang) else None), given


def _given(aside: str) -> str | None:
    """A heading's own rendering of its term, if the aside reads as one."""
    aside = _ARTICLE.sub("", _BRACKET.sub("", aside).strip())
    words = aside.split()
    if CJK_RE.search(aside):
        return aside if _CHINESE_TERM.fullmatch(aside) and not re.search(r"\d", aside) else None
    if not words or len(words) > _MOST_GIVEN_WORDS or not _LATIN_TERM.fullmatch(aside):
        return None
    return aside


def _is_term(text: str, lang: Lang) -> bool:
    """Whether a text reads as a game term's name, not a procedure or a clause: in English
    one to three words, no digits, no function words, not opening on an "-ing" verb
    ("Encountering monster tokens" heads the rule for a situation); in Chinese two to eight
    characters with no "的" ("…的规则" heads a rule) and not a word every rulebook uses."""
    if lang == "zh":
        zh = _settings()["zh"]
        return (
            zh["shortest"] <= len(text) <= zh["longest"]
            and CJK_RE.search(text) is not None
            and _CHINESE_TERM.fullmatch(text) is not None
            and zh["not_a_heading_term"] not in text
            and text not in zh["general"]
        )
    en = _settings()["en"]
    words = text.split()
    return (
        _LATIN_TERM.fullmatch(text) is not None
        and 1 <= len(words) <= en["most_words"]
        and len(text) >= en["shortest"]
        and not (len(words) > 1 and words[0].casefold().endswith("ing"))
        and not any(w.casefold() in STOPWORDS for w in words)
    )


def _defined_terms(text: str) -> list[str]:
    """The terms the book defines ("这称为「通常抽卡」"), in reading order."""
    found = (m for pattern in _settings()["zh"]["defined"] for m in re.finditer(pattern, text))
    return [
        term
        for term in dict.fromkeys(m[1].strip() for m in sorted(found, key=lambda m: m.start()))
        if _is_term(term, "zh")
    ]


def _quoted_terms(text: str) -> list[str]:
    """What the book puts in 「」 or 『』 often enough, as terms, most often first."""
    least = _settings()["zh"]["quoted_at_least"]
    counts = Counter(q.strip() for q in _QUOTED.findall(text))
    return [q for q, n in counts.most_common() if n >= least and _is_term(q, "zh")]


def _frequent_nouns(text: str, terms: Sequence[str]) -> list[str]:
    """The nouns the book repeats most (as jieba segments and tags them), most often first;
    not one it writes mostly inside a longer term (九莲宝 of 九莲宝灯, 怪兽 of 怪兽区域 is
    one when it stands alone often enough)."""
    zh = _settings()["zh"]
    counts = Counter(
        word
        for word, tag in tagged_chinese_words(text)
        if any(tag.startswith(t) for t in zh["noun_tags"])
        and _is_term(word, "zh")
        and word[0] not in zh["not_at_the_edge"]
        and word[-1] not in zh["not_at_the_edge"]
    )
    frequent = []
    for word, _ in counts.most_common():
        longer = [t for t in terms if word in t and t != word]
        alone = re.sub("|".join(map(re.escape, longer)), " ", text) if longer else text
        if alone.count(word) >= zh["frequent_at_least"]:
            frequent.append(word)
        if len(frequent) == zh["frequent_terms"]:
            break
    return frequent


def _seen_in(terms: Sequence[Term], chunks: Sequence[Chunk], lang: Lang) -> list[Term]:
    """The terms, each with the first sentence of the book that uses it."""
    sentences = [s for chunk in chunks for s in split_sentences(chunk.text)]
    seen = []
    for term in terms:
        found = term_pattern(term.original, lang)
        using = [s for s in sentences if found.search(s)]
        # where the book quotes it, it is surely the term (「通常」 the card type, not 通常
        # "usually")
        quoted = (s for s in using if f"「{term.original}」" in s or f"『{term.original}』" in s)
        seen.append(replace(term, seen_in=next(quoted, using[0] if using else "")))
    return seen
