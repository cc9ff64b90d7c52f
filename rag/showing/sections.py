"""A rulebook section as a small standalone HTML page, a quoted sentence marked in it.

For books without pages (Markdown, HTML, text, reStructuredText), and for a PDF when a page
image is too much. The section's text is the Document's (one paragraph a line, "- " list
items, " | " table cells, '#' headings), so it is laid out from those marks; all text is
escaped. The quote is wrapped in `<mark id="rk-quote">` (and, where it runs over several
paragraphs, the rest in plain `<mark>`s): a viewer scrolls to the id, a browser to the
`#rk-quote` fragment, with no script.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from importlib import resources
from itertools import groupby
from string import Template

from rag.contents import Section
from rag.lang import CELL_MARK
from rag.showing.finding import QuoteNotFoundError, find

ANCHOR = "rk-quote"
_TEMPLATE = Template(
    resources.files("rag.showing").joinpath("section.html").read_text(encoding="utf-8")
)


class _Marker:
    """Escapes pieces of the section text, marking what falls in the quote's span."""

    def __init__(self, span: range | None) -> None:
        self.span = span
        self.anchored = False

    def __call__(self, text: str, start: int) -> str:
        span = self.span
        end = start + len(text)
        if span is None or span.stop <= start or end <= span.start:
            return html.escape(text)
        a, b = max(span.start, start) - start, min(span.stop, end) - start
        anchor = "" if self.anchored else f' id="{ANCHOR}"'
        self.anchored = True
        marked = html.escape(text[a:b])
        return f"{html.escape(text[:a])}<mark{anchor}>{marked}</mark>{html.escape(text[b:])}"


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(offset, line) of each non-blank line."""
    offset = 0
    for line in text.split("\n"):
        if line.strip():
            yield offset, line
        offset += len(line) + 1


def _kind(line: str) -> str:
    if line.startswith("#"):
        return "heading"
    if line.startswith("- "):
        return "item"
    return "row" if CELL_MARK in line else "paragraph"


def _cells(line: str, start: int, mark: _Marker) -> str:
    cells, offset = [], start
    for cell in line.split(CELL_MARK):
        cells.append(f"<td>{mark(cell, offset)}</td>")
        offset += len(cell) + len(CELL_MARK)
    return "<tr>" + "".join(cells) + "</tr>"


def _body(text: str, mark: _Marker) -> str:
    blocks: list[str] = []
    for kind, group in groupby(_lines(text), key=lambda pair: _kind(pair[1])):
        lines = list(group)
        if kind == "item":
            items = "".join(f"<li>{mark(line[2:], at + 2)}</li>" for at, line in lines)
            blocks.append(f"<ul>{items}</ul>")
        elif kind == "row":
            blocks.append(
                "<table>" + "".join(_cells(ln, at, mark) for at, ln in lines) + "</table>"
            )
        elif kind == "heading":
            for at, line in lines:
                words = line.lstrip("#")
                level = min(len(line) - len(words) + 1, 4)
                text_at = at + len(line) - len(words.lstrip())
                blocks.append(f"<h{level}>{mark(words.lstrip(), text_at)}</h{level}>")
        else:
            blocks.extend(f"<p>{mark(line, at)}</p>" for at, line in lines)
    return "\n".join(blocks)


def section_html(section: Section, book: str, quote: str | None = None) -> str:
    """The section as an HTML page, the quote marked; QuoteNotFoundError when it is not in
    the section."""
    text = section.text
    span = find(quote, text) if quote else None
    if quote and span is None:
        raise QuoteNotFoundError(f"The quote is not in section {section.number}, {section.title}.")
    path = section.path
    heading = path[-1] if path else book
    where = " › ".join(path[:-1]) or book
    pages = section.pages
    if pages:
        where += f" · p. {pages[0]}" if len(pages) == 1 else f" · pp. {pages[0]}–{pages[-1]}"
    return _TEMPLATE.substitute(
        lang=section.chunks[0].lang,
        title=html.escape(f"{heading} — {book}"),
        path=html.escape(where),
        heading=html.escape(heading),
        body=_body(text, _Marker(span)),
    )
