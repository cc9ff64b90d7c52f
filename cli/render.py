"""How answers, passages and games look; shared by `rules ask`, `rules chat` and the others."""

from __future__ import annotations

import itertools
import re
from collections.abc import Generator, Iterator, Sequence

from rich.console import Group
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from cli.ui import Ui
from rag.prompting import phrases, shorten
from rag.types import LANGS, Answer, GameSummary, StreamEvent, final_answer

SNIPPET_CHARS = 240
NEAREST_SHOWN = 3  # an abstention lists this many of the nearest passages


# The deciding rule's block, heading to blank line, in either language: what the eye finds
# first.
_DECIDING = re.compile(
    rf"^(?:{'|'.join(re.escape(phrases(lang)['heading_deciding']) for lang in LANGS)}):"
    r".*?(?=\n\n|\Z)",
    re.M | re.S,
)


def _answer_text(text: str) -> Text:
    styled = Text(text)
    styled.highlight_regex(_DECIDING, "bold yellow")
    styled.highlight_regex(r"\[\d+\]", "bold cyan")
    return styled


def stream_answer(ui: Ui, events: Iterator[StreamEvent]) -> Answer:
    """Show the answer's tokens as they come, then settle on the final answer.

    The final answer is authoritative (assembly may repair markers or turn the LLM's
    "not in the rulebook" reply into an abstention), so the terminal view is replaced by it,
    and a pipe, which cannot be redrawn, only ever gets the final text.
    """
    try:
        return _show_answer(ui, events)
    finally:
        if isinstance(events, Generator):
            events.close()  # an interrupted answer stops generating (and frees the LLM) now


def _show_answer(ui: Ui, events: Iterator[StreamEvent]) -> Answer:
    if not ui.rich:
        final = final_answer(events)
        ui.text(final.answer)
        return final
    # A spinner while the models load and the rulebook is searched...
    with Live(Spinner("dots", "Looking it up…"), console=ui.out, transient=True):
        first = next(events, None)
    # ...then the screen changes only when the answer does: the conclusion is being written
    # on the same cores, and redrawing the rule text at every spinner frame delays its first
    # token.
    answer: Answer | None = None
    draft = ""
    quotes = ""
    with Live(console=ui.out, auto_refresh=False) as live:
        for event in itertools.chain([first] if first else [], events):
            if event.kind == "quotes":
                quotes = event.text  # the rule text, before any LLM token
            elif event.kind == "token":
                draft += event.text
            else:
                answer = event.answer
                break
            live.update(_in_progress(draft, quotes), refresh=True)
        assert answer is not None  # ask_stream always ends with the answer
        live.update(_answer_text(answer.answer))  # drawn as the view closes
    return answer


def _in_progress(draft: str, quotes: str) -> Group:
    """The rule text found so far, with the conclusion's draft (dim: not yet checked) above
    it, or a note that it is being written."""
    head = Text(draft, style="dim") if draft else Text("Checking the rule…")
    return Group(head, Text(), _answer_text(quotes))


def print_sources(ui: Ui, answer: Answer, seconds: float) -> None:
    """The cited passages (or, for an abstention, the nearest ones), who answered and how
    long the person waited (`seconds`, from the question to the answer)."""
    ui.print()
    if answer.citations:
        ui.text(f"Sources ({answer.game})", style="bold")
        for citation in answer.citations:
            _print_passage(ui, f"[{citation.n}]", citation.section, citation.text)
    elif answer.passages:
        ui.text(f"Nearest passages ({answer.game})", style="bold")
        for hit in answer.passages[:NEAREST_SHOWN]:
            _print_passage(ui, f"#{hit.rank}", hit.chunk.section_path, hit.chunk.text)
    ui.text(f"Answered by {answer.backend} in {seconds:.2f} s.", style="dim")


def _print_passage(ui: Ui, label: str, section: str, text: str) -> None:
    ui.print(Text.assemble((label, "bold cyan"), " ", (section, "bold")))
    ui.indented(shorten(" ".join(text.split()), SNIPPET_CHARS), style="dim")


def print_games(ui: Ui, games: Sequence[GameSummary]) -> None:
    ui.table(
        ("slug", "title", "aliases", "chunks", "source"),
        (
            (
                s.game.slug,
                s.game.title,
                ", ".join(s.game.aliases),
                str(s.chunks),
                "built-in" if s.game.builtin else "added",
            )
            for s in games
        ),
        title="Games",
    )
