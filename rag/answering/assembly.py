"""Assembly: the shown answer, from the checked conclusion and the quotes it rests on.

The conclusion comes first, citing the quotes' passages; then the rule text, each quote
verbatim with its section and page (and its translation, for a question in another
language). A conclusion that failed a check is not shown: a plain "read the rule below"
line stands in its place. When the rulebook is silent the answer says so in the asker's
language and the nearest passages are listed instead (or, when it only seems silent, the
nearest rule text stays shown under that line).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from rag.answering.quotes import citations_for
from rag.prompting import phrases
from rag.types import Answer, Check, Hit, Lang, Quote

# The line above the rule text when no conclusion is shown: the name of its phrase.
Line = Literal["read_the_rule", "read_the_rule_yes_no", "not_answered"]


def _with_reminder(text: str, lang: Lang) -> str:
    return f"{text.strip()}\n\n{phrases(lang)['reminder']}"


def _markers(quotes: Sequence[Quote]) -> str:
    return "".join(f"[{n}]" for n in sorted({q.n for q in quotes}))


def rule_text(quotes: Sequence[Quote], lang: Lang) -> str:
    """The quotes as shown: marker, section (and page) once per passage, then each sentence
    in quotation marks on a line of its own (and its rendering, for a question in another
    language, or a line saying the rendering made failed the checks).

    Section names and sentences stay in the rulebook's words, inside quotation marks, so an
    answer's own language is judged by what Rulekeeper wrote around them.
    """
    words = phrases(lang)
    lines = [f"{words['heading_rule_text']}:"]
    passage = None
    for quote in quotes:  # in marker order, each passage's sentences together
        if quote.n != passage:
            passage = quote.n
            page = f" {words['page'].format(page=quote.page)}" if quote.page else ""
            label = f"「{quote.label}」{page}" if lang == "zh" else f"{quote.label}{page}"
            lines.append(f"[{quote.n}] {label}:")
        # A table's rows keep their lines, under the quote's opening mark.
        lines.append("    “" + quote.text.replace("\n", "\n     ") + "”")
        if quote.translation:
            lines.append(f"      {words['translation']}: {quote.translation}")
        elif quote.translation_withheld:  # the player learns why this one has none
            lines.append(f"      {words['translation']}: {words['translation_withheld']}")
    return "\n".join(lines)


def quoted_answer(
    question: str,
    game: str | None,
    lang: Lang,
    *,
    quotes: list[Quote],
    conclusion: str | None,
    checks: list[Check],
    hits: list[Hit],
    backend: str,
    line: Line | None = None,
) -> Answer:
    """The answer resting on `quotes`: the conclusion when there is one to show, else
    `line` above the rule text: `read_the_rule` (a conclusion was wanted but failed a
    check), `read_the_rule_yes_no` (the rule decides a yes or no the model was not asked
    for) or `not_answered` (the rulebook does not seem to say: an abstention that still
    shows what it found)."""
    words = phrases(lang)
    parts = []
    if conclusion:
        parts.append(f"{words['heading_conclusion']}: {conclusion} {_markers(quotes)}")
    elif line:
        parts.append(words[line])
    parts.append(rule_text(quotes, lang))
    return Answer(
        question=question,
        game=game,
        lang=lang,
        answer=_with_reminder("\n\n".join(parts), lang),
        abstained=line == "not_answered",
        citations=citations_for(quotes, hits),
        passages=hits,
        backend=backend,
        conclusion=conclusion,
        quotes=quotes,
        checks=checks,
    )


def not_covered_answer(
    question: str,
    game: str | None,
    lang: Lang,
    hits: list[Hit],
    backend: str,
    checks: Sequence[Check] = (),
) -> Answer:
    """The rulebook is silent: say so, cite nothing, and list the nearest passages."""
    return Answer(
        question=question,
        game=game,
        lang=lang,
        answer=_with_reminder(phrases(lang)["not_covered"], lang),
        abstained=True,
        citations=[],
        passages=hits,
        backend=backend,
        checks=list(checks),
    )
