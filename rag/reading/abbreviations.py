"""A question put in its rulebook's own spelling of the terms the book abbreviates.

A book may define a short form beside its long one (灵摆区域（P区域）, 额外卡组区域（EX卡组区域）)
and then write the short form throughout, while players type the long one (灵摆怪兽,
额外卡组): their question shares few words with the rule. It is searched in the book's
spelling: before the same words, the form (long or short) that the book writes more often.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rag.lang import CJK_RE, chinese_words

# "long（short）" as a book defines a short form: word characters on both sides of the
# brackets, full-width or not.
_DEFINED = re.compile(r"([\w·&]+)\s*[（(]\s*([\w·&]+)\s*[）)]")
_SHORT = re.compile(r"[A-Za-z]{1,6}")
# How far a spelling is compared before the same words: the characters after the form.
_CONTEXT = 2


@dataclass(frozen=True)
class Abbreviation:
    long: str  # 灵摆
    short: str  # P


def defined_abbreviations(text: str) -> list[Abbreviation]:
    """The short forms the text defines, each once: a Latin short form in brackets after a
    Chinese long one that ends on the same words (额外怪兽区域（EX怪兽区域） defines EX for
    额外); the long form is the last word before those shared words."""
    found: dict[tuple[str, str], Abbreviation] = {}
    for match in _DEFINED.finditer(text):
        left, right = match[1], match[2]
        shared = _shared_end(left, right)
        if not shared or shared in (left, right):
            continue
        long, short = left[: -len(shared)], right[: -len(shared)]
        if _SHORT.fullmatch(long) and CJK_RE.search(short):
            long, short = short, long
        if not (_SHORT.fullmatch(short) and CJK_RE.search(long)):
            continue
        words = chinese_words(long)
        if words:
            found.setdefault((words[-1], short), Abbreviation(words[-1], short))
    return list(found.values())


def _shared_end(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return a[len(a) - n :]


@dataclass(frozen=True)
class BookSpelling:
    """A book's abbreviations, with its text to count how it spells them."""

    abbreviations: tuple[Abbreviation, ...]
    text: str

    @classmethod
    def of(cls, texts: Sequence[str]) -> BookSpelling:
        text = "\n".join(texts)
        return cls(tuple(defined_abbreviations(text)), text)

    def respell(self, question: str) -> str:
        """The question with each form it uses that the book writes less often, before the
        same words, in the book's form (额外卡组 -> EX卡组, where the book writes EX卡组)."""
        for abbreviation in self.abbreviations:
            for said, written in (
                (abbreviation.long, abbreviation.short),
                (abbreviation.short, abbreviation.long),
            ):
                question = self._respelt(question, said, written)
        return question

    def _respelt(self, question: str, said: str, written: str) -> str:
        pieces, last = [], 0
        for match in _form(said).finditer(question):
            after = question[match.end() : match.end() + _CONTEXT]
            if len(after) == _CONTEXT and self.text.count(written + after) > self.text.count(
                said + after
            ):
                pieces += [question[last : match.start()], written]
                last = match.end()
        return "".join([*pieces, question[last:]])


def _form(said: str) -> re.Pattern[str]:
    """Where a form is said: a Latin one not inside a longer Latin word."""
    if CJK_RE.search(said):
        return re.compile(re.escape(said))
    return re.compile(rf"(?<![A-Za-z]){re.escape(said)}(?![A-Za-z])")
