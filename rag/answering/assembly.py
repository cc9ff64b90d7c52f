"""Assembly: the shown answer, from the checked conclusion and the quotes it rests on.

The deciding sentence comes first, verbatim with its section and page (and its rendering,
for a question in another language, or, when none passed the checks, a line saying so and
its terms word by word from the book's glossary); then the conclusion, citing the quotes'
passages, when one passed the checks; then the rest of the rule text as context. A
conclusion that failed a check is not shown: the deciding sentence is the answer (with no
sentence marked deciding, a plain "read the rule below" line stands in its place). When
the rulebook is silent the answer says so in the asker's language and the nearest passages
are listed instead (or, when it only seems silent, the nearest rule text stays shown under
that line).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from rag.answering.quotes import citations_for
from rag.lang import CJK_RE
from rag.prompting import phrases
from rag.types import Answer, Check, Hit, Lang, Quote

# The line above the rule text when no conclusion is shown: the name of its phrase.
Line = Literal["read_the_rule", "read_the_rule_yes_no", "not_answered"]


def _with_reminder(text: str, lang: Lang) -> str:
    return f"{text.strip()}\n\n{phrases(lang)['reminder']}"


def _markers(quotes: Sequence[Quote]) -> str:
    return "".join(f"[{n}]" for n in sorted({q.n for q in quotes}))


def _quote_lines(quote: Quote, lang: Lang) -> list[str]:
    """A sentence in quotation marks, and its rendering (or why it has none)."""
    words = phrases(lang)
    # A table's rows keep their lines, under the quote's opening mark.
    lines = ["    “" + quote.text.replace("\n", "\n     ") + "”"]
    if quote.rendering:
        lines.append(f"      {words['rendering']}: {quote.rendering}")
    elif quote.rendering_withheld:  # the player learns why this one has none
        lines.append(f"      {words['rendering']}: {words['rendering_withheld']}")
        if quote.word_by_word:
            lines.append(f"      {words['word_by_word']}: {quote.word_by_word}")
    return lines


def _source(quote: Quote, lang: Lang) -> str:
    """A quote's marker, section and page, as it heads its passage's sentences."""
    page = f" {phrases(lang)['page'].format(page=quote.page)}" if quote.page else ""
    # A section's name is the rulebook's words: quoted, in an answer in Chinese always, in
    # English when it is Chinese (the English around it is what Rulekeeper says).
    if lang == "zh":
        label = f"「{quote.label}」"
    else:
        label = f"“{quote.label}”" if CJK_RE.search(quote.label) else quote.label
    return f"[{quote.n}] {label}{page}"


def deciding_text(quotes: Sequence[Quote], lang: Lang) -> str:
    """The deciding sentence, with its marker, section and page, or "" when none is
    marked."""
    deciding = next((q for q in quotes if q.deciding), None)
    if deciding is None:
        return ""
    heading = f"{phrases(lang)['heading_deciding']}: {_source(deciding, lang)}"
    return "\n".join([heading, *_quote_lines(deciding, lang)])


def rule_text(quotes: Sequence[Quote], lang: Lang) -> str:
    """The quotes as shown: the deciding sentence first under a heading of its own, then
    the others, marker, section (and page) once per passage, each sentence in quotation
    marks on a line of its own (and its rendering, for a question in another language, or
    a line saying the rendering made failed the checks).

    Section names and sentences stay in the rulebook's words, inside quotation marks, so an
    answer's own language is judged by what Rulekeeper wrote around them.
    """
    return "\n\n".join(p for p in (deciding_text(quotes, lang), _context(quotes, lang)) if p)


def _context(quotes: Sequence[Quote], lang: Lang) -> str:
    """The quotes other than the deciding one, each passage's together under its source."""
    rest = [q for q in quotes if not q.deciding]
    if not rest:
        return ""
    lines = [f"{phrases(lang)['heading_rule_text']}:"]
    passage = None
    for quote in rest:  # in marker order, each passage's sentences together
        if quote.n != passage:
            passage = quote.n
            lines.append(f"{_source(quote, lang)}:")
        lines += _quote_lines(quote, lang)
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
    head = deciding_text(quotes, lang)
    # Shown first, the deciding sentence is the answer when no conclusion is: only a
    # rulebook that seems silent still needs a line to say so.
    opening = (
        words[line] if line and not conclusion and (line == "not_answered" or not head) else ""
    )
    concluded = (
        f"{words['heading_conclusion']}: {conclusion} {_markers(quotes)}" if conclusion else ""
    )
    parts = [p for p in (opening, head, concluded, _context(quotes, lang)) if p]
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
