"""Errors a user can cause or fix; front ends show their message, never a traceback."""

from __future__ import annotations


class RulekeeperError(Exception):
    """Base class: the message says what went wrong and what to do."""


class InputError(RulekeeperError):
    """Bad input from the user: empty question, question too long, bad option."""


class IngestError(RulekeeperError):
    """A rulebook file cannot be read: missing, empty, unknown format, bad encoding."""


class CorpusError(RulekeeperError):
    """The corpus is inconsistent: duplicate slug, bad manifest, unknown game to remove."""


class GameNotFoundError(RulekeeperError):
    """The game named or detected is unknown or ambiguous; lists the games to choose from."""

    def __init__(self, message: str, choices: list[str]) -> None:
        super().__init__(f"{message} Known games: {', '.join(choices)}.")
        self.choices = choices


class IndexError_(RulekeeperError):
    """The on-disk index is missing or corrupt; rebuild with `rules index --rebuild`."""


class ModelError(RulekeeperError):
    """A model cannot be found or loaded; the message names what to install or set."""
