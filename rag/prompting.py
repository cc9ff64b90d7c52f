"""Prompt building from the template files in rag/prompts/.

The system prompt holds the fixed rules (so llama.cpp can reuse its cached prefix); the
question travels as delimited data, and the answer format comes last in the user message,
where small models follow it best.
"""

from __future__ import annotations

import string
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

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


def build_prompt(
    question: str,
    lang: Lang,
    passages: list[Hit],
    *,
    game_title: str,
    passage_chars: int,
    history: list[tuple[str, str]] | None = None,
) -> Prompt:
    words = phrases(lang)
    system = render("system.txt", game_title=game_title)
    blocks = [
        render(
            "passage.txt",
            n=str(i),
            section=" › ".join(hit.chunk.section[1:]),  # the title is in the system prompt
            text=shorten(hit.chunk.text, passage_chars),
        ).strip()
        for i, hit in enumerate(passages, start=1)
    ]
    user = render(
        "user.txt",
        passages="\n\n".join(blocks),
        question=question.strip(),
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
    return Prompt(messages=messages, question=question, lang=lang, passages=passages)
