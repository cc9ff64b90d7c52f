"""A PDF rulebook's page as an image, a quoted sentence highlighted where it stands.

The sentence's glyphs are found through the reader's own reading of the page
(rag.reading.pdf.glyph_lines: the columns, ligatures and drop capitals that made the
Document text), and each line it covers gets one box, from its first glyph to its last: a
sentence wrapping lines, or running on into the next column, gets a box on each line.
pypdfium2 (through pdfplumber) draws the page; PyMuPDF would be faster but is AGPL.
"""

from __future__ import annotations

import io
import logging
import math
import statistics
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag.lang import CELL_MARK
from rag.reading.pdf import Glyph, body_size, glyph_lines
from rag.showing.finding import NoPagesError, PageNotFoundError, QuoteNotFoundError, find

Span = tuple[float, float]  # x0, x1 on the page
_TALL = 1.5  # of the line's usual glyph height: taller is a drop capital
# PDFium may not be called from two threads at once, not even on two documents (API
# workers draw pages on a thread pool).
_PDFIUM = threading.Lock()
HIGHLIGHT = (255, 196, 0, 96)  # translucent amber: the text under it stays black and legible


@dataclass(frozen=True)
class Box:
    """A highlighted line, as fractions of the page's width and height from its top left."""

    x0: float
    top: float
    x1: float
    bottom: float


@dataclass(frozen=True)
class PageLayout:
    """A page of a book, its size in points, and where the quote stands on it."""

    page: int
    pages: int  # the book's page count
    width: float
    height: float
    highlights: tuple[Box, ...] = ()


def is_paged(book: Path) -> bool:
    return book.suffix.lower() == ".pdf"


@contextmanager
def _page(book: Path, number: int) -> Iterator[tuple[Any, Any]]:
    """The open PDF and its page `number` (1-based); errors name the page count."""
    import pdfplumber

    if not is_paged(book):
        raise NoPagesError(f"{book.name} has no pages: it is not a PDF.")
    logging.getLogger("pdfminer").setLevel(logging.ERROR)  # one message of ours instead
    with pdfplumber.open(book) as pdf:
        count = len(pdf.pages)
        if not 1 <= number <= count:
            raise PageNotFoundError(f"No page {number}: the book has {count} pages (1–{count}).")
        yield pdf, pdf.pages[number - 1]


Place = tuple[int, int]  # (line, glyph) in glyph_lines' order


def _quote_glyphs(page: Any, quote: str) -> list[list[Glyph]]:
    """The quote's glyphs on the page, line by line. The reader's body size (below which
    text is decoration) is the page's own here, not the book's: reading every page for it
    would make each page as slow as the whole book, and the two differ only on a page set
    mostly in another size."""
    lines = glyph_lines(page, body_size([page]))
    places = _spelt(lines, quote)
    if not places:
        raise QuoteNotFoundError(f"The quote is not on page {page.page_number}.")
    return [
        [glyph for j, glyph in enumerate(line) if (i, j) in places]
        for i, line in enumerate(lines)
        if any((i, j) in places for j in range(len(line)))
    ]


def _spelt(lines: list[list[Glyph]], quote: str) -> set[Place]:
    """Where the quote's letters stand in reading order; for a table's row whose cells
    the reader read down each cell (a header in two lines), where each cell's do."""
    flat = [(i, j) for i, line in enumerate(lines) for j in range(len(line))]
    found = find(quote, [lines[i][j].text for i, j in flat])
    if found is not None:
        return {flat[k] for k in found}
    if CELL_MARK not in quote:
        return set()
    cells = [cell.split() for cell in quote.split(CELL_MARK)]
    for row in range(len(lines)):
        places: set[Place] = set()
        left = -math.inf
        for words in cells:
            cell = _cell(lines, words, row, (left, math.inf))
            if cell is None:
                break
            places |= cell
            left = max(lines[i][j].x1 for i, j in cell if i == row)
        else:
            return places
    return set()


def _cell(lines: list[list[Glyph]], words: list[str], row: int, within: Span) -> set[Place] | None:
    """A table cell's words: the first ones on line `row` within a span, the rest on the
    lines below, under them."""
    if row >= len(lines):
        return None
    line = lines[row]
    kept = [j for j, g in enumerate(line) if g.x1 > within[0] and g.x0 < within[1]]
    for k in range(len(words), 0, -1):
        found = find(" ".join(words[:k]), [line[j].text for j in kept])
        if found is None:
            continue
        run = {(row, kept[m]) for m in found}
        if k == len(words):
            return run
        under = (min(line[j].x0 for _, j in run), max(line[j].x1 for _, j in run))
        rest = _cell(lines, words[k:], row + 1, under)
        if rest:
            return run | rest
    return None


Points = tuple[float, float, float, float]  # x0, top, x1, bottom on the page


def _line_boxes(page: Any, quote: str | None) -> list[Points]:
    """One box a line, around the quote's glyphs on it; none without a quote. A glyph far
    taller than the line's others (a drop capital, two lines tall) widens the box but does
    not heighten it, so the box does not reach over the line below."""
    if not quote:
        return []
    boxes = []
    for line in _quote_glyphs(page, quote):
        usual = statistics.median(g.bottom - g.top for g in line)
        body = [g for g in line if g.bottom - g.top <= _TALL * usual]
        top, bottom = min(g.top for g in body), max(g.bottom for g in body)
        boxes.append((min(g.x0 for g in line), top, max(g.x1 for g in line), bottom))
    return boxes


def _layout(pdf: Any, page: Any, boxes: list[Points]) -> PageLayout:
    left, top, right, bottom = page.bbox
    width, height = right - left, bottom - top
    highlights = tuple(
        Box((x0 - left) / width, (y0 - top) / height, (x1 - left) / width, (y1 - top) / height)
        for x0, y0, x1, y1 in boxes
    )
    size = float(page.width), float(page.height)
    return PageLayout(page.page_number, len(pdf.pages), *size, highlights)


def page_layout(book: Path, number: int, quote: str | None = None) -> PageLayout:
    """Page `number`'s size and the quote's boxes on it (none without a quote)."""
    with _page(book, number) as (pdf, page):
        return _layout(pdf, page, _line_boxes(page, quote))


def render_page(book: Path, number: int, width: int, highlights: Sequence[Box] = ()) -> bytes:
    """Page `number` as a PNG `width` pixels wide, the boxes (a `page_layout`'s) tinted."""
    with _page(book, number) as (_, page):
        with _PDFIUM:
            image = page.to_image(width=width, antialias=True)
        left, top, right, bottom = page.bbox
        w, h = right - left, bottom - top
        image.draw_rects(
            [
                (left + b.x0 * w, top + b.top * h, left + b.x1 * w, top + b.bottom * h)
                for b in highlights
            ],
            fill=HIGHLIGHT,
            stroke_width=0,
        )
        out = io.BytesIO()
        # Full colour: a palette would be chosen anew with the tint and shift the page's
        # other colours. Less compression than the default: faster to write.
        image.save(out, format="PNG", quantize=False, compress_level=3)
        return out.getvalue()
