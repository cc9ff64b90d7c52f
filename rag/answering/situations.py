"""Situations a rulebook must name to settle a question about them (prompts/situations.toml).

"What happens when the attack deck runs out?" is answered by a rule that speaks of running
out. The passages found for it speak of the attack deck, so they are close, and the closeness
signal cannot tell that none of them says what happens when it runs out; a small model then
writes a rule of its own. When no sentence of the passages names the situation the question
asks about, the rulebook is silent on it.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from rag.prompting import template
from rag.types import Check, Lang


@dataclass(frozen=True)
class Situation:
    name: str
    what: str  # the situation in words, for the check's detail
    asks: dict[str, re.Pattern[str]]  # how a question names it, per question language
    speaks: re.Pattern[str]  # how a rule names it, in either language
    # Like it, but settled by other rules (running out of actions: what things cost)
    unlike: dict[str, re.Pattern[str]]

    def asked(self, question: str, lang: Lang) -> bool:
        """Whether the question asks about this situation (and not about one like it)."""
        asks, unlike = self.asks.get(lang), self.unlike.get(lang)
        return bool(asks and asks.search(question)) and not (unlike and unlike.search(question))


def _either(patterns: Sequence[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


@cache
def situations() -> tuple[Situation, ...]:
    table = tomllib.loads(template("situations.toml"))
    return tuple(
        Situation(
            name,
            entry["what"],
            {lang: _either(patterns) for lang, patterns in entry["asks"].items()},
            _either(entry["speaks"]),
            {lang: _either(patterns) for lang, patterns in entry.get("unlike", {}).items()},
        )
        for name, entry in table.items()
    )


def unnamed_situation(question: str, lang: Lang, rules: Sequence[str]) -> Check | None:
    """A failing check when the question asks about a situation that none of `rules` (the
    sentences of the passages found) names; None when it asks about none, or a rule names it."""
    for situation in situations():
        if situation.asked(question, lang) and not any(
            situation.speaks.search(rule) for rule in rules
        ):
            return Check(
                "situation",
                False,
                f"the question asks about {situation.what}, and no sentence of the passages "
                "found names it: the rulebook does not seem to say",
            )
    return None
