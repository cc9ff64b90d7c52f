"""Prompt templates (rag/prompts/) and what a generator is given.

The system prompt holds the fixed rules and is the same for every game, question and task,
so llama.cpp reuses its cached prefix instead of reading it again; questions travel as
delimited data.
"""

from __future__ import annotations

import json
import string
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

from rag.types import Lang


@cache
def template(name: str) -> str:
    return resources.files("rag").joinpath("prompts", name).read_text(encoding="utf-8")


@cache
def phrases(lang: Lang) -> dict[str, str]:
    table = tomllib.loads(template("phrases.toml"))
    return dict(table[lang])


def fill(source: str, name: str, /, **values: str) -> str:
    """Fill a template's text; a placeholder without a value is a bug, so it raises."""
    fields = {f for _, f, _, _ in string.Formatter().parse(source) if f}
    missing = fields - values.keys()
    if missing:
        raise KeyError(f"template {name} needs {sorted(missing)}")
    return source.format(**values)


def render(name: str, **values: str) -> str:
    return fill(template(name), name, **values)


def system_message() -> dict[str, str]:
    return {"role": "system", "content": template("system.txt").strip()}


@dataclass(frozen=True)
class Prompt:
    """What a generator is given: chat messages and the shape its reply must take."""

    task: Literal["select", "render", "conclude", "judge"]
    question: str  # as the player asked it
    messages: list[dict[str, str]]
    # A JSON schema the reply must follow; backends that can enforce one (llama.cpp's
    # grammar) do, and the reply is parsed leniently either way.
    schema: dict[str, Any] | None = None
    max_tokens: int | None = None  # None: the backend's setting
    # A reply asked for again, to see whether the model repeats it: sampled hotter, with a
    # seed of its own. None: the backend's settings.
    temperature: float | None = None
    seed: int | None = None

    def sampling(self, temperature: float, seed: int | None) -> tuple[float, int | None]:
        """The temperature and seed to sample this prompt with: its own, else the backend's
        (`temperature`, `seed`)."""
        return (
            temperature if self.temperature is None else self.temperature,
            seed if self.seed is None else self.seed,
        )


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


def reply_text(reply: str, field: str) -> tuple[str, dict[str, Any]]:
    """The string `field` of a reply shaped by a prompt's schema, and all its fields. A reply
    that is not a JSON object (a backend that cannot hold the schema) is the text itself;
    one that began as an object and broke off (cut where it looped, or at its token limit)
    holds nothing: its text is not fit to show."""
    try:
        data = json.loads(reply)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        return ("" if reply.lstrip().startswith("{") else reply.strip()), {}
    text = data.get(field)
    return (text.strip() if isinstance(text, str) else ""), data
