"""The data files beside the answering code, each read once: tuned numbers (tuning.toml),
the deciding sentence's model (deciding.toml) and each language's word lists (words/)."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from typing import Any

from rag.types import Lang


@cache
def data(*path: str) -> dict[str, Any]:
    """A TOML file of rag/answering, by its path there ("words", "en.toml")."""
    text = resources.files("rag.answering").joinpath(*path).read_text(encoding="utf-8")
    return tomllib.loads(text)


def tuning(name: str) -> dict[str, Any]:
    """A table of tuning.toml: numbers a stage was tuned with on the gold sets."""
    table: dict[str, Any] = data("tuning.toml")[name]
    return table


def words(lang: Lang) -> dict[str, Any]:
    """A language's word lists (words/en.toml, words/zh.toml)."""
    return data("words", f"{lang}.toml")
