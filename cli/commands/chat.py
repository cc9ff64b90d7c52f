"""`rules chat`: an interactive session in which follow-up questions keep the game and topic."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import typer
from rich.text import Text

from cli.options import GameOption, KOption, NoDaemonOption
from cli.render import print_games, print_sources, stream_answer
from cli.rules import Rules
from cli.state import get_state
from cli.ui import Ui
from rag.errors import GameNotFoundError, RulekeeperError
from rag.types import Answer, GameInfo, StreamEvent, Turn

HISTORY_FILE = "chat_history"  # under settings.home
HISTORY_LINES = 1000

HELP = """\
Ask a question about a game's rules; follow-ups ("and if I'm starving?") keep the game.
  /game NAME   switch to another game (and start a new topic)
  /game        show the current game
  /games       list the games
  /help        this help
  /quit        leave (or Ctrl-D); Ctrl-C stops an answer"""


class ChatSession:
    """The conversation's current game and its turns so far (all about that game)."""

    def __init__(self, rules: Rules, game: str | None = None, k: int | None = None):
        self.rules = rules
        self.k = k
        self.game: GameInfo | None = rules.corpus.resolve(game) if game else None
        self.history: list[Turn] = []

    @property
    def prompt(self) -> str:
        return f"{self.game.slug if self.game else 'rules'}> "

    def switch(self, name: str) -> GameInfo:
        self.game = self.rules.corpus.resolve(name)
        self.history.clear()
        return self.game

    def ask(self, question: str) -> Iterator[StreamEvent]:
        """Answer about the game the question names, else the conversation's game.

        Unlike `rules ask --game`, the current game is not a pin: naming another game moves
        the conversation there, and turns about the old game stop steering the new one.
        """
        game = self.rules.corpus.detect(question) or self.game
        if game != self.game:
            self.history.clear()
        self.game = game
        return self._answer(question, game)

    def _answer(self, question: str, game: GameInfo | None) -> Iterator[StreamEvent]:
        # No game yet: the pipeline takes the only one, or the one clearly closest to the
        # question; else the user must say which.
        try:
            yield from self.rules.ask_stream(
                question, game.slug if game else None, self.k, self.history
            )
        except GameNotFoundError as exc:
            raise GameNotFoundError(
                "Which game? Name it in the question or choose one with /game NAME.",
                exc.choices,
            ) from exc

    def record(self, answer: Answer) -> None:
        if self.game is None and answer.game:
            self.game = self.rules.corpus.resolve(answer.game)
        self.history.append(Turn(answer.question, answer.answer, answer.game))


@contextmanager
def line_history(path: Path, ui: Ui) -> Iterator[None]:
    """Up-arrow recall across sessions, where readline exists; a missing file is no error."""
    try:
        import readline
    except ImportError:  # Windows without pyreadline: plain input still works
        yield
        return
    with suppress(OSError):  # no history yet
        readline.read_history_file(path)
    readline.set_history_length(HISTORY_LINES)
    try:
        yield
    finally:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(path)
        except OSError as exc:
            ui.note(f"Chat history not saved: {exc}")


def run_command(session: ChatSession, ui: Ui, line: str) -> bool:
    """Carry out a /command; False when the session should end."""
    name, _, argument = line.partition(" ")
    argument = argument.strip()
    match name.lower():
        case "/quit" | "/exit":
            return False
        case "/help":
            ui.text(HELP)
        case "/games":
            print_games(ui, session.rules.games())
        case "/game" if argument:
            info = session.switch(argument)
            ui.text(f"Now answering about {info.title} ({info.slug}).")
        case "/game":
            current = session.game.title if session.game else "none yet: name one or /game NAME"
            ui.text(f"Current game: {current}.")
        case _:
            ui.error(f"Unknown command {name}: /help lists the commands.")
    return True


def run_chat(session: ChatSession, ui: Ui, read_line: Callable[[str], str] = input) -> None:
    ui.print(Text("Rulekeeper chat: ask about a game's rules; /help for commands.", "bold"))
    while True:
        try:
            line = read_line(session.prompt).strip()
        except EOFError:  # Ctrl-D
            ui.print()
            return
        except KeyboardInterrupt:  # Ctrl-C at the prompt drops the line, like a shell
            ui.print()
            continue
        try:
            if line.startswith("/"):
                if not run_command(session, ui, line):
                    return
            elif line:
                asked = time.perf_counter()
                answer = stream_answer(ui, session.ask(line))
                session.record(answer)
                print_sources(ui, answer, time.perf_counter() - asked)
                ui.print()  # a gap before the next prompt
        except KeyboardInterrupt:
            ui.note("(answer stopped)")
        except RulekeeperError as exc:
            ui.error(str(exc))


def chat(
    ctx: typer.Context,
    game: GameOption = None,
    k: KOption = None,
    no_daemon: NoDaemonOption = False,
) -> None:
    """Talk about the rules: follow-up questions keep the game and topic.

    Commands inside: /game NAME, /games, /help, /quit. Ctrl-C stops the current answer;
    Ctrl-D leaves. Answers come from the local service when it runs (see `rules service`).
    """
    state = get_state(ctx)
    rules = state.rules(here=no_daemon)
    session = ChatSession(rules, game, k)
    with line_history(rules.settings.home / HISTORY_FILE, state.ui):
        run_chat(session, state.ui)
