"""The question as the answering stages read it: parsed once, carried through them all."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from rag.answering.rewording import (
    asks_how_many,
    asks_when_not,
    asks_when_not_allowed,
    asks_yes_or_no,
)
from rag.types import GameInfo, Lang


@dataclass(frozen=True)
class Shape:
    """What a question asks for, told from its words."""

    yes_no: bool  # "Is it immediate?", 是立刻激活吗？
    how_many: bool  # "how many wire cards does everyone get?"
    when_not: bool  # only the "not" side: "when can't I do a stealth test?"
    when_not_allowed: bool  # of those, about being allowed ("can't", not "doesn't")

    @classmethod
    def of(cls, question: str, lang: Lang) -> Shape:
        return cls(
            yes_no=asks_yes_or_no(question, lang),
            how_many=asks_how_many(question, lang),
            when_not=asks_when_not(question, lang),
            when_not_allowed=asks_when_not_allowed(question, lang),
        )


@dataclass(frozen=True)
class Question:
    text: str
    lang: Lang
    game: GameInfo
    earlier: str | None = None  # the previous question of a follow-up
    # The book's own words for the game terms a question in the other language names
    # (rag.pipeline.Pipeline.book_terms).
    book_terms: tuple[str, ...] = ()
    # The question with the terms its book abbreviates spelt as the book writes them
    # (rag.pipeline.Pipeline.book_spelling); None: as asked.
    book_spelling: str | None = None

    @cached_property
    def shape(self) -> Shape:
        return Shape.of(self.text, self.lang)

    @property
    def in_context(self) -> str:
        """A follow-up with the question it follows."""
        return self._after_earlier(self.text)

    @property
    def searched(self) -> str:
        """What candidates are ranked by: the question in context, spelt as its book spells
        the terms it abbreviates, with the book's words for the terms it names."""
        return " ".join([self._after_earlier(self.book_spelling or self.text), *self.book_terms])

    def _after_earlier(self, text: str) -> str:
        return f"{self.earlier} {text}" if self.earlier else text
