"""Prompt building from the template files in rag/prompts/.

The system prompt holds the fixed rules and is the same for every game and question, so
llama.cpp reuses its cached prefix instead of reading it again; the question travels as
delimited data, and the answer format comes last in the user message, where small models
follow it best.
"""

from __future__ import annotations

import string
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from rag.evidence import Excerpt, Sentence
from rag.rewording import both_sides
from rag.types import Hit, Lang

# The model answers exactly this when the passages do not cover the question.
NOT_COVERED_SENTINEL = "NOT_IN_RULEBOOK"


@cache
def template(name: str) -> str:
    return resources.files("rag").joinpath("prompts", name).read_text(encoding="utf-8")


@cache
def phrases(lang: Lang) -> dict[str, str]:
    table = tomllib.loads(template("phrases.toml"))
    return dict(table[lang])


def render(name: str, **values: str) -> str:
    """Fill a template; a placeholder without a value is a bug, so it raises."""
    text = template(name)
    fields = {f for _, f, _, _ in string.Formatter().parse(text) if f}
    missing = fields - values.keys()
    if missing:
        raise KeyError(f"template {name} needs {sorted(missing)}")
    return text.format(**values)


@dataclass(frozen=True)
class Prompt:
    """What a generator gets: chat messages, plus the parts the extractive backend reads."""

    messages: list[dict[str, str]]
    question: str
    lang: Lang
    passages: list[Hit]  # passage [n] is passages[n - 1]
    # The sentences chosen as evidence, best first, as (passage number, sentence); empty
    # when the prompt shows whole passages.
    evidence: list[tuple[int, str]] = field(default_factory=list)


def shorten(text: str, limit: int) -> str:
    """Cut a passage at a sentence or word boundary near `limit` characters."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    for mark in ("。", ". ", "！", "？", "\n"):
        pos = cut.rfind(mark)
        if pos > limit * 0.6:
            return cut[: pos + 1].rstrip() + " …"
    return cut.rsplit(" ", 1)[0] + " …"


def whole_passages(hits: Sequence[Hit], passage_chars: int) -> list[Excerpt]:
    """Each passage shown whole, cut near `passage_chars` (when no evidence is selected)."""
    return [Excerpt(hit, shorten(hit.chunk.text, passage_chars)) for hit in hits]


def build_prompt(
    question: str,
    lang: Lang,
    excerpts: Sequence[Excerpt],
    *,
    game_title: str,
    history: list[tuple[str, str]] | None = None,
    evidence: Sequence[Sentence] = (),
) -> Prompt:
    """Number the excerpts [1]..[n] and fill the templates.

    `evidence` (the chosen sentences, best first) is passed on for the extractive backend.
    """
    words = phrases(lang)
    system = render("system.txt")
    blocks = [
        render(
            "passage.txt",
            n=str(i),
            section=" › ".join(excerpt.hit.chunk.section[1:]),  # the title heads the passages
            text=excerpt.text,
        ).strip()
        for i, excerpt in enumerate(excerpts, start=1)
    ]
    user = render(
        "user.txt",
        game_title=game_title,
        passages="\n\n".join(blocks),
        question=both_sides(question, lang, evidence[0].text if evidence else None).strip(),
        lang_name=words["lang_name"],
        heading_conclusion=words["heading_conclusion"],
        heading_procedure=words["heading_procedure"],
        heading_conditions=words["heading_conditions"],
        heading_unsaid=words["heading_unsaid"],
        sentinel=NOT_COVERED_SENTINEL,
    )
    messages = [{"role": "system", "content": system}]
    for earlier_question, earlier_answer in history or []:
        messages.append({"role": "user", "content": earlier_question})
        messages.append({"role": "assistant", "content": earlier_answer})
    messages.append({"role": "user", "content": user})
    passages = [excerpt.hit for excerpt in excerpts]
    number = {hit.chunk.id: n for n, hit in enumerate(passages, start=1)}
    return Prompt(
        messages=messages,
        question=question,
        lang=lang,
        passages=passages,
        evidence=[(number[s.hit.chunk.id], s.text) for s in evidence if s.hit.chunk.id in number],
    )
