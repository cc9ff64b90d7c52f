"""`rules ask`: one question, answered with cited passages."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from cli.errors import ExitCode
from cli.options import GameOption, KOption, NoDaemonOption
from cli.render import print_sources, stream_answer
from cli.state import get_state
from cli.viewing import open_quote
from rag.types import final_answer


def ask(
    ctx: typer.Context,
    question: Annotated[
        list[str],
        typer.Argument(
            metavar="QUESTION", help="The question; quotes are optional.", show_default=False
        ),
    ],
    game: GameOption = None,
    k: KOption = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print exactly one JSON object (the answer, citations, passages, timings) "
            "and nothing else on stdout.",
        ),
    ] = False,
    fail_on_abstain: Annotated[
        bool,
        typer.Option(
            "--fail-on-abstain",
            help=f"Exit with code {int(ExitCode.ABSTAINED)} when the rulebook does not cover "
            "the question.",
        ),
    ] = False,
    open_rule: Annotated[
        bool,
        typer.Option(
            "--open",
            help="Then open the deciding rule where it stands in the rulebook: its page with "
            "the sentence highlighted (a PDF), else its section; prints the file's path.",
        ),
    ] = False,
    no_daemon: NoDaemonOption = False,
) -> None:
    """Answer a rules question from the rulebook, citing the passages it used.

    The answer streams as it is written; the cited passages, with their section paths,
    follow. A warm local service answers when it runs; when none does, this command answers
    and then starts one in the background for the next question (see `rules service`).
    Example: rules ask "Can I move diagonally?" --game suros
    """
    started = time.perf_counter()  # what is printed is the wait, loading and building too
    state = get_state(ctx)
    rules = state.rules(here=no_daemon, start=True)
    events = rules.ask_stream(" ".join(question), game, k)
    if as_json:
        answer = final_answer(events)
        typer.echo(json.dumps(answer.to_json(), ensure_ascii=False))
    else:
        answer = stream_answer(state.ui, events)
        print_sources(state.ui, answer, time.perf_counter() - started)
    state.answered()
    if open_rule:
        open_quote(state.ui, rules, answer)
    if answer.abstained and fail_on_abstain:
        raise typer.Exit(ExitCode.ABSTAINED)
