"""Selection: the LLM chooses which quoted sentences answer the question, before it writes.

Its reply is held to a JSON schema whose ids are an enum of the sentences' numbers, so
llama.cpp's grammar lets it name only sentences that exist: choosing is what a small model
does well, and here it cannot get the form wrong. An empty choice is its way of saying the
rulebook is silent. A backend that cannot enforce the schema may still reply off-form;
such a reply is read leniently (the ids it names that exist), and a reply naming none
counts as no selection, so the conclusion rests on the closest quotes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from rag.answering.candidates import Sentence
from rag.prompting import Prompt, phrases, render, system_message
from rag.types import Lang

SELECTION_TOKENS = 24  # {"ids": [3, 1, 7]} and some slack
_IDS = re.compile(r'"ids"\s*:\s*\[([^\]]*)\]')


def selection_schema(count: int, most: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "ids": {
                "type": "array",
                "items": {"type": "integer", "enum": list(range(1, count + 1))},
                "maxItems": most,
            }
        },
        "required": ["ids"],
    }


def context_line(lang: Lang, earlier_question: str | None) -> str:
    """The earlier question of a follow-up ("and if I'm starving?"), as the prompts show it."""
    if not earlier_question:
        return ""
    return phrases(lang)["earlier_question"].format(question=earlier_question) + "\n"


def numbered(sentences: Sequence[Sentence]) -> str:
    """The sentences as the model is shown them to choose from: "1. (Section) text"."""
    return "\n".join(
        f"{i}. ({s.hit.chunk.section[-1]}) {s.text}" for i, s in enumerate(sentences, start=1)
    )


def selection_prompt(
    question: str,
    lang: Lang,
    candidates: Sequence[Sentence],
    *,
    game_title: str,
    most: int,
    earlier_question: str | None = None,
) -> Prompt:
    user = render(
        "select.txt",
        game_title=game_title,
        sentences=numbered(candidates),
        context=context_line(lang, earlier_question),
        question=question,
        most=str(most),
    )
    return Prompt(
        task="select",
        question=question,
        messages=[system_message(), {"role": "user", "content": user}],
        schema=selection_schema(len(candidates), most),
        max_tokens=SELECTION_TOKENS,
    )


def parse_selection(reply: str, count: int, most: int) -> list[int] | None:
    """The 1-based ids chosen, best first, each once, at most `most`; [] when the model
    chose none; None when the reply names no ids at all (off-form)."""
    try:
        data = json.loads(reply)
        raw = data["ids"] if isinstance(data, dict) else None
    except (json.JSONDecodeError, KeyError):
        match = _IDS.search(reply)
        raw = re.findall(r"\d+", match[1]) if match else None
    if not isinstance(raw, list):
        return None
    ids: list[int] = []
    for value in raw:
        try:
            n = int(value)
        except (TypeError, ValueError):
            continue
        if 1 <= n <= count and n not in ids:
            ids.append(n)
    if raw and not ids:
        return None  # it named only sentences that do not exist
    return ids[:most]
