"""Exit codes scripts can rely on, and the error boundary that turns a user's mistake into one
line on stderr instead of a traceback."""

from __future__ import annotations

import errno
from enum import IntEnum
from typing import Any, NoReturn

import typer
from typer import _click  # typer vendors click: its Context is what TyperGroup.invoke takes
from typer.core import TyperGroup

from cli.state import CliState
from rag.errors import IndexError_, ModelError, RulekeeperError


class ExitCode(IntEnum):
    OK = 0
    USER_ERROR = 1
    USAGE = 2  # typer reports these itself
    ABSTAINED = 3
    SETUP = 4
    INTERRUPTED = 130  # typer maps KeyboardInterrupt to it


_MEANINGS = {
    ExitCode.OK: "ok (an answer saying the rulebook is silent is still 0)",
    ExitCode.USER_ERROR: "user error: empty question, unknown game, unreadable file, bad setting",
    ExitCode.USAGE: "usage error",
    ExitCode.ABSTAINED: "abstained: the rulebook does not cover it "
    "(only with `rules ask --fail-on-abstain`)",
    ExitCode.SETUP: "setup problem: a model missing, the index corrupt "
    "(the message says what to run)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}
# Markdown: the help is rendered with rich_markup_mode="markdown".
EXIT_CODES_HELP = "Exit codes:\n\n" + "\n".join(
    f"* {int(code)} {meaning}" for code, meaning in _MEANINGS.items()
)


def exit_code_for(exc: Exception) -> ExitCode:
    # A missing model or a corrupt index is fixed by the person installing, not by rephrasing.
    return ExitCode.SETUP if isinstance(exc, ModelError | IndexError_) else ExitCode.USER_ERROR


def message_for(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:  # "Permission denied: '/x'", not "[Errno 13]"
        return f"{exc.strerror}: {exc.filename!r}" if exc.filename else exc.strerror
    return str(exc)


class RulesGroup(TyperGroup):
    """The root command group; every subcommand runs inside its invoke, so errors land here.

    Only errors a user can cause or fix are caught: anything else is a bug and keeps its
    traceback.
    """

    def invoke(self, ctx: _click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RulekeeperError as exc:
            _fail(ctx, exc)
        except OSError as exc:
            # A failed system call on the user's files (permissions, disk full, a missing
            # folder) is theirs to fix. An OSError without an errno was raised by code, so it
            # is a bug; a closed pipe (`rules show ... | head`) typer silences itself.
            if exc.errno in (None, errno.EPIPE):
                raise
            _fail(ctx, exc)


def _fail(ctx: _click.Context, exc: Exception) -> NoReturn:
    ctx.ensure_object(CliState).ui.error(message_for(exc))
    raise typer.Exit(exit_code_for(exc)) from exc
