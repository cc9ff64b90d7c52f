"""The rulebook where a quote stands, for `rules show --page` and `rules ask --open`: a PDF's
page as an image with the sentence highlighted, else its section as HTML with the sentence
marked, written under HOME's cache (rag.showing) and opened in the system's viewer.

On a machine without a display nothing is opened (a text browser would take over the
terminal); the file's path is printed either way.
"""

from __future__ import annotations

import os
import sys
import webbrowser
from pathlib import Path
from typing import TYPE_CHECKING

from cli.ui import Ui
from rag.errors import InputError

if TYPE_CHECKING:
    from cli.rules import Rules
    from rag.settings import Settings
    from rag.types import Answer, GameInfo


def page_image(settings: Settings, game: GameInfo, page: int, quote: str | None) -> Path:
    """The page of a PDF rulebook as a PNG in the cache, the quote highlighted."""
    from rag.showing.pages import is_paged
    from rag.showing.views import Views

    if not is_paged(game.path):
        raise InputError(
            f"{game.title} is a book without pages ({game.path.suffix or 'a folder'}): read a "
            f"section with `rules show {game.slug} SECTION`, or see it with the sentence "
            f"marked at /v1/games/{game.slug}/sections/SECTION/view of `rules serve`."
        )
    return Views(settings).page_image(game.path, page, quote, settings.showing.width)


def open_quote(ui: Ui, rules: Rules, answer: Answer) -> None:
    """Open the deciding sentence (else the first quoted) where it stands in the rulebook."""
    from rag.showing.sections import ANCHOR
    from rag.showing.views import Views

    quote = next((q for q in answer.quotes if q.deciding), None) or next(iter(answer.quotes), None)
    if quote is None:
        ui.note("No rule text was quoted, so there is no page to open.")
        return
    game = rules.corpus.resolve(quote.game)
    path = Views(rules.settings).quote_file(game, rules.chunks(game.slug), quote)
    url = path.as_uri() + (f"#{ANCHOR}" if path.suffix == ".html" else "")
    if _has_display() and webbrowser.open(url):
        ui.note(f"Opened the rule where it stands: {path}")
    else:
        ui.note(f"The rule where it stands (no viewer to open it here): {path}")


def _has_display() -> bool:
    """Whether a graphical viewer can open: always on macOS and Windows; on Linux and the
    like, only with an X or Wayland display."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
