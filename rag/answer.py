"""Answer assembly: tidy the generated text and check its citations against the passages.

Small models pad the answer format: placeholders kept in angle brackets, lines that say
only "None" or "无", lines of bare markers, a line repeating an earlier one. Those lines
go (with their markers, which cite nothing). Markers are then normalised to [n]; a marker
that points at no passage is dropped; each claim keeps the markers of the passages that
support it (rag.citations); an answer left with no marker cites the passage that best
supports its first line. The sentinel NOT_IN_RULEBOOK, an answer left
empty, or a conclusion stating a number no given passage states turns into an abstention
in the asker's language.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rag.citations import SupportScorer, recite
from rag.lang import tokenize
from rag.prompting import NOT_COVERED_SENTINEL, Prompt, phrases
from rag.types import LANGS, Answer, Citation, Hit, Lang

# [1], [1, 2], [1][2], 【1】, [passage 1], (1) is too common in rule text to count.
_MARKER = re.compile(r"[\[【]\s*(?:passage\s*)?(\d+(?:\s*[,，、]\s*\d+)*)\s*[\]】]", re.I)


def normalise_markers(text: str, valid: int) -> tuple[str, list[int]]:
    """Rewrite markers as [n], dropping numbers outside 1..valid; return cited numbers in order."""
    cited: list[int] = []

    def replace(match: re.Match[str]) -> str:
        numbers = [int(x) for x in re.findall(r"\d+", match.group(1))]
        kept = [n for n in numbers if 1 <= n <= valid]
        for n in kept:
            if n not in cited:
                cited.append(n)
        return "".join(f"[{n}]" for n in kept)

    return _MARKER.sub(replace, text), cited


# A format placeholder the model filled in but kept around a line's whole content: <...>, or
# [...] holding no number, then maybe markers. Other angle brackets are text ("HP <1").
_PLACEHOLDER = re.compile(
    r"\s*(?:<([^<>\n]*)>|\[(?!\s*(?:passage\s*)?\d)([^\[\]\n]*)\])\s*((?:\[\d+\]\s*)*)", re.I
)
_FILLER = re.compile(
    r"none|n/?a|nothing|not applicable|no (steps|conditions)( or exceptions)?"
    r"|无|没有|暂无|不适用|没有(具体)?(步骤|条件|例外|条件或例外|条件和例外|(规则书)?未提及的内容)",
    re.I,
)
# The prompt's "If no passage answers the question, write only: NOT_IN_RULEBOOK", paraphrased.
_SAYS_NOT_COVERED = re.compile(r"no passage answers the question", re.I)
# A marker cut off where a stopped stream ended ("… [8").
_CUT_MARKER = re.compile(r"\s*[\[【]\s*\d*\s*$")
_HEADING_KEYS = ("heading_conclusion", "heading_procedure", "heading_conditions", "heading_unsaid")


def _heading(line: str) -> tuple[str, str]:
    """Split "Heading: content" for the answer format's headings (either language)."""
    for lang in LANGS:
        for key in _HEADING_KEYS:
            match = re.match(rf"\s*{re.escape(phrases(lang)[key])}\s*[:：]\s*", line)
            if match:
                return line[: match.end()], line[match.end() :]
    return "", line


def _substance(content: str) -> str:
    """The content without markers, list numbering, brackets and punctuation, lowercased."""
    content = _MARKER.sub(" ", content)
    content = re.sub(r"^\s*(?:[-*•]|\d+[.)、])\s*", "", content)
    return re.sub(r"[\s\[\]()（）.。,，;；:：!！\"'“”]+", " ", content).strip().lower()


def tidy(text: str) -> str:
    """Drop the padding lines a small model writes into the answer format (see above).

    A bare heading stays only when lines of its own (a list) follow it.
    """
    kept: list[tuple[str, bool]] = []  # (line, is a bare heading)
    seen: set[str] = set()
    for line in _CUT_MARKER.sub("", text).splitlines():
        heading, content = _heading(line)
        placeholder = _PLACEHOLDER.fullmatch(content)
        if placeholder:
            filled, markers = placeholder.group(1) or placeholder.group(2) or "", placeholder[3]
            content = f"{filled} {markers}".strip()
            line = heading + content
        substance = _substance(content)
        if not line.strip():
            kept.append(("", False))
        elif heading and not _MARKER.sub("", content).strip():
            kept.append((line.rstrip(), True))
        elif substance and not _FILLER.fullmatch(substance) and substance not in seen:
            seen.add(substance)
            kept.append((line.rstrip(), False))
    lines = [
        line
        for i, (line, bare) in enumerate(kept)
        if not bare or (i + 1 < len(kept) and kept[i + 1][0] and not _heading(kept[i + 1][0])[0])
    ]
    return "\n".join(lines).strip()


# A number standing alone: not a marker, not part of a name like "D6" or "Mission2".
_NUMBER = re.compile(r"(?<![\[\d.A-Za-z])\d+(?![\]\d])")
_WORDS_1_TO_12 = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                  "eleven", "twelve")  # fmt: skip
_NUMBER_WORDS = {word: str(n) for n, word in enumerate(_WORDS_1_TO_12, start=1)}


def _numbers(text: str) -> set[str]:
    """The numbers a text states: digits, and English number words as digits."""
    text = _MARKER.sub(" ", text)
    words = {_NUMBER_WORDS[w] for w in re.findall(r"[a-z]+", text.lower()) if w in _NUMBER_WORDS}
    return set(_NUMBER.findall(text)) | words


def invented_numbers(conclusion: str, passages: Sequence[Hit]) -> set[str]:
    """Numbers in the conclusion that no given passage states.

    A small model asked "how many..." about something the rulebook never gives answers with
    a number anyway ("10", "4"); a number found in none of its passages is invented, so the
    answer is not grounded and the pipeline abstains instead.
    """
    _, content = _heading(conclusion)
    stated = set().union(
        *(_numbers(f"{hit.chunk.section_path} {hit.chunk.text}") for hit in passages)
    )
    return _numbers(content) - stated


def best_supporting_passage(
    text: str, passages: Sequence[Hit], support: SupportScorer | None = None
) -> int | None:
    """1-based number of the passage supporting the text best: by `support` when given,
    else the one sharing most words with it, if any shares one (no use across languages)."""
    if support is not None and passages:
        return int(support([text])[0].argmax()) + 1
    words = set(tokenize(text))
    overlaps = [len(words & set(tokenize(h.chunk.text))) for h in passages]
    if not overlaps or max(overlaps) == 0:
        return None
    return overlaps.index(max(overlaps)) + 1


def _citation(n: int, hit: Hit) -> Citation:
    return Citation(
        n=n,
        chunk_id=hit.chunk.id,
        game=hit.chunk.game,
        section=hit.chunk.section_path,
        text=hit.chunk.text,
    )


def _with_reminder(text: str, lang: Lang) -> str:
    reminder = phrases(lang)["reminder"]
    text = re.sub(r"\n{3,}", "\n\n", text.strip())
    return text if reminder in text else f"{text}\n\n{reminder}"


def not_covered_answer(
    question: str, game: str | None, lang: Lang, hits: list[Hit], backend: str
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
    )


def assemble_answer(
    question: str,
    game: str | None,
    lang: Lang,
    generated: str,
    hits: list[Hit],
    prompt: Prompt,
    backend: str,
    support: SupportScorer | None = None,
) -> Answer:
    """`support` scores claims against the given passages (see rag.citations); without it
    markers are only checked for pointing at a given passage."""
    text = generated.strip()
    if text.startswith(NOT_COVERED_SENTINEL) or _SAYS_NOT_COVERED.search(text):
        return not_covered_answer(question, game, lang, hits, backend)
    # Small models sometimes echo the sentinel or a template's "[n]" inside a real answer.
    text = tidy(text.replace(NOT_COVERED_SENTINEL, "").replace("[n]", ""))
    given = prompt.passages
    if not text or invented_numbers(text.split("\n", 1)[0], given):
        return not_covered_answer(
            question, game, lang, hits, backend
        )  # marker [n] refers to given[n - 1], which is hits[n - 1]
    text, cited = normalise_markers(text, len(given))
    if cited and support is not None:
        text, cited = normalise_markers(recite(text, support), len(given))
    if not cited:
        first_line, _, rest = text.partition("\n")
        best = best_supporting_passage(first_line, given, support)
        if best is not None:
            text = f"{first_line} [{best}]" + (f"\n{rest}" if rest else "")
            cited = [best]
    return Answer(
        question=question,
        game=game,
        lang=lang,
        answer=_with_reminder(text, lang),
        abstained=False,
        citations=[_citation(n, given[n - 1]) for n in sorted(cited)],
        passages=hits,
        backend=backend,
    )
