"""PDFs read as a reader sees them: columns in order, headings from fonts, no page furniture.

pdfplumber (MIT, over pdfminer.six) gives every character with its font, size and position;
PyMuPDF is faster but AGPL, which a MIT tool cannot ship, and 12 pages read in about a
second here. From the characters:

- words too small to read (logo letters, trademark marks) are dropped;
- ligature glyphs that the PDF maps to a bare "f" are restored ("frst" -> "first") from their
  width, which is the width of the letters they join;
- lines are cut at a column gutter (an x that many lines leave blank) and read column by
  column between full-width lines;
- a large single letter starting a line (a drop capital) is rejoined to its word;
- lines join into paragraphs until the style changes, the spacing widens or a short line
  ends a sentence; end-of-line hyphens are joined;
- a table's rows of numbers stay lines of their own, cells marked " | ", and a header whose
  cells take two or three lines is read down each cell, not across the page;
- page numbers and running headers/footers in the page margins are dropped;
- headings are the paragraphs set in a larger size or in bold, levelled by size, or the
  PDF's own bookmarks when it has them; they are written as '#' lines.
"""

from __future__ import annotations

import logging
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from rag.errors import IngestError
from rag.lang import CELL_MARK, CJK_RE, is_number_row

_TINY = 0.55  # of the body size: smaller text is decoration, not rules
_DROP_CAP = 1.8  # of the body size: a lone letter this large starts a paragraph
_HEADING_SIZE = 1.12  # of the body size
_MAX_HEADING_WORDS = 12
_MAX_LEVELS = 4
_MARGIN = 0.08  # of the page height: where page numbers and running heads sit
_GUTTER_LINES = 0.25  # of a page's lines must leave the gutter blank
_MIN_GUTTER_LINES = 4
_PARAGRAPH_PITCH = 1.35  # of the usual line pitch: a wider gap starts a paragraph
_COLUMN_PITCH = 1.5  # of the text size: a line this near a column's goes on in it
_SHORT_LINE = 0.8  # of the column width: a sentence ending a line this short ends a paragraph
_SENTENCE_END = tuple(".!?:。！？：")
_NUMBER_RE = re.compile(r"^(page\s*)?\d{1,4}(\s*(/|of)\s*\d{1,4})?$", re.IGNORECASE)
_BULLETS = frozenset("•●▪◦‣·-–")
_LIGATURES = ("fi", "fl", "ff", "ffi", "ffl")


@dataclass(frozen=True)
class Glyph:
    """One character as drawn (a restored ligature is its letters), where it stands on the
    page, in points from the top left."""

    text: str
    x0: float
    top: float
    x1: float
    bottom: float


@dataclass
class _Word:
    text: str
    x0: float
    x1: float
    top: float
    bottom: float
    size: float
    bold: bool
    glyphs: list[Glyph] = field(default_factory=list)


@dataclass
class _Line:
    """Words on one baseline within one column."""

    words: list[_Word]
    page: int
    column: int = -1  # counted from the left between gutters; -1 across the page

    @property
    def text(self) -> str:
        out = self.words[0].text
        for before, word in zip(self.words, self.words[1:], strict=False):
            glued = word.x0 - before.x1 < 0.1 * word.size  # one word split by a font change
            out += word.text if glued else " " + word.text
        return out

    @property
    def x0(self) -> float:
        return self.words[0].x0

    @property
    def x1(self) -> float:
        return self.words[-1].x1

    @property
    def top(self) -> float:
        return min(w.top for w in self.words)

    @property
    def bottom(self) -> float:
        return max(w.bottom for w in self.words)

    @property
    def size(self) -> float:
        return _majority((round(w.size, 1), len(w.text)) for w in self.words)

    @property
    def bold(self) -> bool:
        return _majority((w.bold, len(w.text)) for w in self.words)


@dataclass
class _Paragraph:
    lines: list[_Line]
    heading_level: int = 0
    text: str = field(default="")

    @property
    def page(self) -> int:
        return self.lines[0].page

    @property
    def style(self) -> tuple[float, bool]:
        return self.lines[0].size, self.lines[0].bold


def _majority(weighted: Iterable[tuple[Any, int]]) -> Any:
    counts: Counter[Any] = Counter()
    for value, weight in weighted:
        counts[value] += weight
    return counts.most_common(1)[0][0]


# ---------------------------------------------------------------- characters and words


def _is_bold(fontname: str) -> bool:
    return any(mark in fontname.casefold() for mark in ("bold", "black", "heavy", "semibold"))


def _restore_ligatures(chars: list[dict[str, Any]]) -> None:
    """A glyph mapped to "f" but as wide as "fi" or "ff" is that ligature (fonts lose it)."""
    widths: dict[tuple[str, str], list[float]] = {}
    for char in chars:
        if len(char["text"]) == 1 and char["size"]:
            key = (char["fontname"], char["text"])
            widths.setdefault(key, []).append((char["x1"] - char["x0"]) / char["size"])
    median = {key: statistics.median(values) for key, values in widths.items()}
    for char in chars:
        if char["text"] != "f" or not char["size"]:
            continue
        font = char["fontname"]
        width = (char["x1"] - char["x0"]) / char["size"]
        plain = median.get((font, "f"))
        if plain is None or width < 1.5 * plain:
            continue
        expected = {
            ligature: sum(median.get((font, letter), plain) for letter in ligature)
            for ligature in _LIGATURES
        }
        # Ties ("fi" and "fl" are often equally wide) go to the commoner "fi".
        char["text"] = min(_LIGATURES, key=lambda lig: abs(expected[lig] - width))


def _words(page: Any) -> list[_Word]:
    from pdfplumber.utils.text import extract_words

    chars = [dict(c) for c in page.chars]
    _restore_ligatures(chars)
    words = []
    for word in extract_words(chars, return_chars=True, x_tolerance=1.5):
        glyphs = word["chars"]
        words.append(
            _Word(
                text=word["text"],
                x0=word["x0"],
                x1=word["x1"],
                top=word["top"],
                bottom=word["bottom"],
                size=_majority((round(c["size"], 1), 1) for c in glyphs),
                bold=_majority((_is_bold(c["fontname"]), 1) for c in glyphs),
                glyphs=[Glyph(c["text"], c["x0"], c["top"], c["x1"], c["bottom"]) for c in glyphs],
            )
        )
    return words


# ---------------------------------------------------------------- lines and columns


def _baselines(words: list[_Word]) -> list[list[_Word]]:
    """Words grouped into rows that share a baseline (within a third of their size)."""
    rows: list[list[_Word]] = []
    for word in sorted(words, key=lambda w: (w.bottom, w.x0)):
        if rows and abs(rows[-1][-1].bottom - word.bottom) <= word.size / 3:
            rows[-1].append(word)
        else:
            rows.append([word])
    return [sorted(row, key=lambda w: w.x0) for row in rows]


def _gutters(rows: list[list[_Word]], width: float) -> list[float]:
    """The x positions that many rows leave blank between two of their words."""
    blank = [0] * (int(width) + 1)
    for row in rows:
        for before, after in pairwise(row):
            if after.x0 - before.x1 >= 0.6 * after.size:
                for x in range(int(before.x1) + 1, int(after.x0)):
                    blank[x] += 1
    needed = max(_MIN_GUTTER_LINES, _GUTTER_LINES * len(rows))
    gutters: list[float] = []
    x = 0
    while x < len(blank):
        if blank[x] >= needed:
            start = x
            while x < len(blank) and blank[x] >= needed:
                x += 1
            run = range(start, x)
            best = max(blank[i] for i in run)
            gutters.append(statistics.mean(i for i in run if blank[i] == best))
        x += 1
    return gutters


def _leaves_blank(row: list[_Word], gutter: float) -> bool:
    return any(before.x1 < gutter < after.x0 for before, after in pairwise(row))


def _columned_rows(rows: list[list[_Word]], gutter: float) -> range:
    """The rows from the first to the last that leave the gutter blank: the columns' extent,
    with the rows that go on in one column above or below it (`_goes_on`), as where one
    column is longer than the other.

    Rows further off or across the gutter (a title, a closing note) span the page.
    """
    blank = [i for i, row in enumerate(rows) if _leaves_blank(row, gutter)]
    first, last = blank[0], blank[-1]
    while first > 0 and _goes_on(rows[first - 1], rows[first], gutter):
        first -= 1
    while last + 1 < len(rows) and _goes_on(rows[last + 1], rows[last], gutter):
        last += 1
    return range(first, last + 1)


def _goes_on(row: list[_Word], neighbour: list[_Word], gutter: float) -> bool:
    """Whether a row next to a columned one is a line of one column: all on one side of
    the gutter, at most a line's pitch away (`_COLUMN_PITCH`)."""
    one_side = all(w.x1 < gutter for w in row) or all(w.x0 > gutter for w in row)
    return one_side and abs(row[0].bottom - neighbour[0].bottom) <= _COLUMN_PITCH * row[0].size


def _split_row(row: list[_Word], gutters: list[float], page: int) -> list[_Line]:
    """A row cut where it leaves a gutter blank; a part crossing a gutter spans columns."""
    if not gutters:
        return [_Line(row, page, -1)]
    parts: list[list[_Word]] = [[row[0]]]
    for before, after in pairwise(row):
        if any(before.x1 < g < after.x0 for g in gutters):
            parts.append([after])
        else:
            parts[-1].append(after)
    lines = []
    for words in parts:
        crossing = any(words[0].x0 < g < words[-1].x1 for g in gutters)
        column = -1 if crossing else sum(words[0].x0 > g for g in gutters)
        lines.append(_Line(words, page, column))
    return lines


def _is_prose_gutter(rows: list[list[_Word]], gutter: float) -> bool:
    """Columns of prose, not a table: the text on each side runs to several words a line."""
    left, right = [], []
    for row in rows:
        left.append(sum(w.x1 < gutter for w in row))
        right.append(sum(w.x0 > gutter for w in row))
    sides = [[n for n in side if n] for side in (left, right)]
    return all(side and statistics.mean(side) >= 3 for side in sides)


def _reading_order(lines: list[_Line]) -> list[_Line]:
    """Column by column between lines that span the gutter, top to bottom within each."""
    ordered: list[_Line] = []
    block: list[_Line] = []
    for line in sorted(lines, key=lambda ln: (ln.top, ln.x0)):
        if line.column == -1:
            ordered += sorted(block, key=lambda ln: (ln.column, ln.top))
            ordered.append(line)
            block = []
        else:
            block.append(line)
    return ordered + sorted(block, key=lambda ln: (ln.column, ln.top))


def _page_lines(page: Any, number: int, body_size: float) -> list[_Line]:
    words = [w for w in _words(page) if w.size >= _TINY * body_size]
    if not words:
        return []
    rows = _baselines(_join_drop_caps(words, body_size))
    gutters = [g for g in _gutters(rows, float(page.width)) if _is_prose_gutter(rows, g)]
    extents = {g: _columned_rows(rows, g) for g in gutters}
    lines = [
        line
        for i, row in enumerate(rows)
        for line in _split_row(row, [g for g in gutters if i in extents[g]], number)
    ]
    return _reading_order(lines)


def glyph_lines(page: Any, body_size: float) -> list[list[Glyph]]:
    """A pdfplumber page's lines in the reader's order, each as its glyphs: where each
    character of the text `read_pdf` gives stands on the page."""
    return [
        [g for word in line.words for g in word.glyphs] for line in _page_lines(page, 0, body_size)
    ]


def _join_drop_caps(words: list[_Word], body_size: float) -> list[_Word]:
    """A large lone letter ("L") is the first letter of the word beside it ("ondon")."""
    kept = []
    for cap in words:
        is_cap = len(cap.text) == 1 and cap.text.isalpha() and cap.size >= _DROP_CAP * body_size
        beside = [
            w
            for w in words
            if w is not cap
            and cap.top - w.size / 2 <= w.top < cap.bottom
            and w.x0 >= cap.x1
            and w.text[:1].islower()
        ]
        if is_cap and beside:
            first = min(beside, key=lambda w: (round(w.top), w.x0))
            first.text = cap.text + first.text
            first.glyphs = cap.glyphs + first.glyphs
        else:
            kept.append(cap)
    return kept


# ---------------------------------------------------------------- paragraphs


def _usual_pitch(lines: list[_Line]) -> float:
    pitches = [
        after.top - before.top
        for before, after in pairwise(lines)
        if before.page == after.page
        and before.column == after.column
        and 0 < after.top - before.top < 3 * after.size
    ]
    return statistics.median(pitches) if pitches else 0.0


def _starts_paragraph(before: _Line, line: _Line, pitch: float, column_right: float) -> bool:
    if before.size != line.size or before.column != line.column or _is_item(line):
        return True
    if _is_number_row(before) or _is_number_row(line):  # a table's rows are lines apart
        return True
    gap = line.top - before.top
    if gap <= 0 or (pitch and gap > _PARAGRAPH_PITCH * max(pitch, line.size)):
        return True
    short = before.x1 < before.x0 + _SHORT_LINE * (column_right - before.x0)
    # Bold running on into plain text at full width is emphasis, not a heading above it.
    return short and (before.bold != line.bold or before.text.endswith(_SENTENCE_END))


def _is_item(line: _Line) -> bool:
    """A list item: a bullet, or a step number set larger than its text ("1 Prepare…")."""
    first = line.words[0]
    return first.text in _BULLETS or (first.text.isdigit() and first.size > line.size)


def _paragraphs(lines: list[_Line]) -> list[_Paragraph]:
    pitch = _usual_pitch(lines)
    right: dict[tuple[int, int], float] = {}
    for line in lines:
        key = (line.page, line.column)
        right[key] = max(right.get(key, 0.0), line.x1)
    paragraphs: list[_Paragraph] = []
    for line in lines:
        last = paragraphs[-1].lines[-1] if paragraphs else None
        if (
            last is None
            or last.page != line.page
            or _starts_paragraph(last, line, pitch, right[(line.page, line.column)])
        ):
            paragraphs.append(_Paragraph([line]))
        else:
            paragraphs[-1].lines.append(line)
    for paragraph in paragraphs:
        paragraph.text = _table_text(paragraph.lines) or _joined(
            line.text for line in paragraph.lines
        )
    return paragraphs


def _joined(texts: Iterable[str]) -> str:
    """Lines of one paragraph as one line: hyphens at line ends joined, CJK without spaces."""
    out = ""
    for text in texts:
        if not out:
            out = text
        elif re.search(r"[^\W\d_]-$", out) and text[:1].islower():
            out = out[:-1] + text
        elif CJK_RE.match(out[-1]) and CJK_RE.match(text[0]):
            out += text
        else:
            out += " " + text
    return out


# ---------------------------------------------------------------- tables

_CELL_GAP = 1.0  # of the text size: a wider gap between words on a line separates cells
_MAX_CELL_WORDS = 4  # on one line of a table's header


def _cells(line: _Line) -> list[_Line]:
    """The line cut where words stand a cell gap apart."""
    cells = [[line.words[0]]]
    for before, word in pairwise(line.words):
        if word.x0 - before.x1 > _CELL_GAP * word.size:
            cells.append([])
        cells[-1].append(word)
    return [_Line(words, line.page, line.column) for words in cells]


def _is_number_row(line: _Line) -> bool:
    return is_number_row(line.text) and len(_cells(line)) >= 2  # prose fails the first


def _overlaps(a: _Line, b: _Line) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1


def _table_text(lines: list[_Line]) -> str | None:
    """A table's row or header as its cells, " | " between them, or None for other text.

    A row is numbers alone in cells ("4*- 5   3   2" -> "4*- 5 | 3 | 2"). A header whose
    cells take two or three lines ("Number of / players", "Sherlock / Team") would read
    across ("Number of Sherlock players Team"); it is read down each cell instead, when
    each cell of a lower line stands under one cell of the first line and no other, and
    every cell is a few words (a stretched line of prose has long stretches between gaps).
    """
    first, *lower = [_cells(line) for line in lines]
    if len(first) < 2 or len(lower) > 2:
        return None
    if not lower:
        return CELL_MARK.join(c.text for c in first) if is_number_row(lines[0].text) else None
    if any(len(cell.words) > _MAX_CELL_WORDS for row in (first, *lower) for cell in row):
        return None
    columns: list[list[str]] = [[cell.text] for cell in first]
    for row in lower:
        under = [[i for i, top in enumerate(first) if _overlaps(cell, top)] for cell in row]
        if any(len(found) != 1 for found in under) or len({f[0] for f in under}) < len(row):
            return None
        for cell, (i,) in zip(row, under, strict=True):
            columns[i].append(cell.text)
    return CELL_MARK.join(_joined(column) for column in columns)


# ---------------------------------------------------------------- furniture and headings


def _drop_furniture(paragraphs: list[_Paragraph], heights: dict[int, float]) -> list[_Paragraph]:
    """Page numbers and lines repeated on most pages, when they sit in a page margin."""

    def in_margin(p: _Paragraph) -> bool:
        height = heights[p.page]
        return p.lines[-1].bottom < _MARGIN * height or p.lines[0].top > (1 - _MARGIN) * height

    def shape(p: _Paragraph) -> str:
        return re.sub(r"\d+", "#", p.text.casefold())

    pages = len(heights)
    repeated = Counter(shape(p) for p in paragraphs if in_margin(p))
    return [
        p
        for p in paragraphs
        if not (
            in_margin(p)
            and (_NUMBER_RE.match(p.text) or (pages >= 3 and repeated[shape(p)] > pages / 2))
        )
    ]


def _may_be_heading(paragraph: _Paragraph) -> bool:
    text = paragraph.text
    return (
        len(text.split()) <= _MAX_HEADING_WORDS
        and not text.endswith((".", ",", ";", "。", "，", "；"))
        and any(c.isalpha() for c in text)
        and len({(line.size, line.bold) for line in paragraph.lines}) == 1
    )


def _mark_headings_by_font(paragraphs: list[_Paragraph], body_size: float) -> None:
    """Paragraphs in a larger size, or bold at body size, are headings; larger is higher.

    A cover page (a first page with no body text) holds the book's title in styles of its
    own: those are not sections.
    """
    candidates = [
        p
        for p in paragraphs
        if _may_be_heading(p)
        and (p.style[0] >= _HEADING_SIZE * body_size or (p.style[1] and p.style[0] >= body_size))
    ]
    first_page = [p for p in paragraphs if p.page == 1]
    cover: set[tuple[float, bool]] = set()
    if first_page and all(p in candidates for p in first_page):
        later = {p.style for p in candidates if p.page > 1}
        cover = {p.style for p in first_page} - later
    styles = sorted({p.style for p in candidates} - cover, key=lambda s: (-s[0], not s[1]))
    levels = {style: min(rank + 1, _MAX_LEVELS) for rank, style in enumerate(styles)}
    for paragraph in candidates:
        paragraph.heading_level = levels.get(paragraph.style, 0)


def _squash(text: str) -> str:
    return re.sub(r"\W+", "", text.casefold())


def _mark_headings_by_outline(
    paragraphs: list[_Paragraph], outline: Sequence[tuple[int, str, int | None]]
) -> None:
    """Bookmarks name the headings and their levels; font-found headings nest below them."""
    if not outline:
        return
    depth = max(level for level, _, _ in outline)
    for paragraph in paragraphs:
        if paragraph.heading_level:
            paragraph.heading_level = min(paragraph.heading_level + depth, _MAX_LEVELS + depth)
    cursor = 0
    for level, title, page in outline:
        wanted = _squash(title)
        for i in range(cursor, len(paragraphs)):
            paragraph = paragraphs[i]
            if (page is None or paragraph.page == page) and _squash(paragraph.text) == wanted:
                paragraph.heading_level = level
                cursor = i + 1
                break


def _outline(pdf: Any) -> list[tuple[int, str, int | None]]:
    """(level, title, page) of each bookmark, in order; empty when the PDF has none."""
    page_of = {page.page_obj.pageid: page.page_number for page in pdf.pages}
    entries: list[tuple[int, str, int | None]] = []
    try:
        for level, title, dest, action, _ in pdf.doc.get_outlines():
            target = _bookmark_page(pdf, dest, action)
            entries.append((level, str(title).strip(), page_of.get(target)))
    except Exception:  # pdfminer raises PDFNoOutlines and others for absent or broken ones
        return []
    return [entry for entry in entries if entry[1]]


def _bookmark_page(pdf: Any, dest: Any, action: Any) -> int | None:
    from pdfminer.pdftypes import resolve1

    if dest is None and action is not None:
        dest = resolve1(action).get("D")
    dest = resolve1(dest)
    if isinstance(dest, (bytes, str)):
        dest = resolve1(pdf.doc.get_dest(dest))
    if isinstance(dest, dict):
        dest = resolve1(dest.get("D"))
    if isinstance(dest, list) and dest:
        ref = dest[0]
        return getattr(ref, "objid", None)
    return None


# ---------------------------------------------------------------- the book


def body_size(pages: Sequence[Any]) -> float:
    """The size most of the pages' text is set in."""
    counts: Counter[float] = Counter(
        round(c["size"], 1) for page in pages for c in page.chars if c["text"].strip()
    )
    return counts.most_common(1)[0][0] if counts else 0.0


def read_pdf(path: Path) -> list[list[str]]:
    """The book as pages of lines: one paragraph a line, headings written as '#' lines."""
    import pdfplumber

    # pdfminer logs each oddity of a damaged file; the user gets our one message instead.
    logging.getLogger("pdfminer").setLevel(logging.ERROR)
    try:
        with pdfplumber.open(path) as pdf:
            body = body_size(pdf.pages)
            lines = [
                line
                for number, page in enumerate(pdf.pages, start=1)
                for line in _page_lines(page, number, body)
            ]
            heights = {n: float(p.height) for n, p in enumerate(pdf.pages, start=1)}
            outline = _outline(pdf)
    except Exception as exc:  # pdfminer signals damage and encryption with many types
        if "password" in str(exc).casefold() or type(exc).__name__ == "PDFPasswordIncorrect":
            raise IngestError(
                f"{path} is a password-protected PDF: save an unprotected copy."
            ) from exc
        raise IngestError(
            f"Cannot read PDF {path}: {exc or type(exc).__name__}. The file is corrupt or not "
            "a PDF; re-download or re-export it."
        ) from exc
    if not lines:
        raise IngestError(
            f"{path} has no extractable text (a scanned PDF?): run OCR on it first "
            "(for example `ocrmypdf in.pdf out.pdf`), or add a text version of the rulebook."
        )
    paragraphs = _drop_furniture(_paragraphs(lines), heights)
    _mark_headings_by_font(paragraphs, body)
    _mark_headings_by_outline(paragraphs, outline)
    pages: list[list[str]] = [[] for _ in heights]
    for paragraph in paragraphs:
        marks = "#" * paragraph.heading_level
        pages[paragraph.page - 1].append(f"{marks} {paragraph.text}" if marks else paragraph.text)
    return pages
