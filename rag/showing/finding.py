"""Where a quoted sentence stands in what the reader read, matched on letters and digits.

A quote is a sentence of the Document text; the page it came from holds the same letters in
the same order, but not the same spaces, hyphens or ligature glyphs (a joined line-end
hyphen, "ﬁ" for "fi", a drop capital). So both sides are compared as their letters and
digits alone, case-folded and NFKC-normalised, and each kept letter remembers the piece
(a glyph, or a character of a text) it came from.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from rag.errors import InputError


class ShowingError(InputError):
    """A page or a quote that cannot be shown; `code` names the kind for the API."""

    code = "invalid_request"


class PageNotFoundError(ShowingError):
    code = "page_not_found"


class NoPagesError(ShowingError):
    code = "no_pages"


class QuoteNotFoundError(ShowingError):
    code = "quote_not_found"


def _letters(piece: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKC", piece).casefold() if c.isalnum())


def _marks(text: str) -> int:
    """How many punctuation marks the text starts with ("“(" in "“(Each"), spaces apart."""
    count = 0
    for char in text:
        if char.isalnum():
            break
        count += not char.isspace()
    return count


def find(quote: str, pieces: Sequence[str]) -> range | None:
    """The pieces (glyphs in reading order, or a text's characters) that spell the quote,
    the first place it occurs, with the punctuation it opens and ends with; None when they
    do not, or the quote has no letters."""
    wanted = _letters(quote)
    if not wanted:
        return None
    letters: list[str] = []
    owner: list[int] = []
    for i, piece in enumerate(pieces):
        kept = _letters(piece)
        letters.append(kept)
        owner.extend([i] * len(kept))
    at = "".join(letters).find(wanted)
    if at < 0:
        return None
    first, last = owner[at], owner[at + len(wanted) - 1]
    for _ in range(_marks(quote)):
        if first == 0 or letters[first - 1] or not pieces[first - 1].strip():
            break
        first -= 1
    for _ in range(_marks(quote[::-1])):
        if last + 1 == len(pieces) or letters[last + 1] or not pieces[last + 1].strip():
            break
        last += 1
    return range(first, last + 1)
