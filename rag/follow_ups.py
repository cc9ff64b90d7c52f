"""Whether a question follows up the one before it, or starts a new topic.

A follow-up ("and if I'm starving?", 「那如果是怪物呢？」) is searched and answered with the
earlier question beside it; any other question alone. The rule reads the question's own
words, per language (prompts/follow_ups.toml): a question refers back when it opens with a
word such as "what about" or 那, or, when short, holds one such as "it" or 这个 or ends with
呢. Chinese has no spaces, so its length is counted in characters, not words.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache

from rag.lang import CJK_RE
from rag.prompting import template
from rag.types import Lang

# What a question ends with besides its words: spaces, punctuation, closing quotes.
_CLOSING = re.compile(r"[\s?？!！.。…,，;；:：'\"“”‘’」』）)]+$")
_OPENING = re.compile(r"^[\s'\"“‘「『（(]+")
# A length unit: one Chinese character, or one run of other letters and digits.
_UNIT = re.compile(rf"{CJK_RE.pattern}|[^\W_]+")


@dataclass(frozen=True)
class Referring:
    """One language's words that tie a question to the one before it."""

    short: int
    openers: re.Pattern[str]
    openers_any_length: bool
    referring: re.Pattern[str]
    tails: tuple[str, ...]
    in_characters: bool  # Chinese: no spaces, length and words counted in characters


def _any(words: list[str], *, whole_words: bool) -> re.Pattern[str]:
    if not words:
        return re.compile(r"(?!)")  # matches nothing
    alternatives = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    return re.compile(rf"\b(?:{alternatives})\b" if whole_words else alternatives, re.I)


@cache
def _rules() -> dict[str, Referring]:
    table = tomllib.loads(template("follow_ups.toml"))
    rules = {}
    for lang, entry in table.items():
        chinese = lang == "zh"
        rules[lang] = Referring(
            short=int(entry["short"]),
            openers=_any(entry["openers"], whole_words=not chinese),
            openers_any_length=bool(entry["openers_any_length"]),
            referring=_any(entry["referring"], whole_words=not chinese),
            tails=tuple(entry["tails"]),
            in_characters=chinese,
        )
    return rules


def follows_up(question: str, lang: Lang) -> bool:
    """Whether `question`, in `lang`, refers back to the question before it."""
    rule = _rules()[lang]
    text = _OPENING.sub("", _CLOSING.sub("", question.replace("’", "'")))
    units = len(_UNIT.findall(text)) if rule.in_characters else len(text.split())
    short = units <= rule.short
    if rule.openers.match(text) and (short or rule.openers_any_length):
        return True
    if not short:
        return False
    return bool(rule.referring.search(text)) or text.endswith(rule.tails)
