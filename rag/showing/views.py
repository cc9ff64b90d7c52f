"""What a front end asks to see, kept in a bounded cache under HOME: a page image with the
quote highlighted, the quote's boxes on its page, a section as HTML, or, for `rules ask
--open`, whichever of them shows a quote best.

Cached files are named by a digest of what they show (the book file's content, page,
quote, width), which also serves as the HTTP ETag: a changed book is a new name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

from rag.contents import Section, table_of_contents
from rag.settings import Settings
from rag.showing.cache import FileCache
from rag.showing.finding import QuoteNotFoundError
from rag.showing.pages import Box, PageLayout, is_paged, page_layout, render_page
from rag.showing.sections import section_html
from rag.types import Chunk, GameInfo, Quote

# Bumped when the drawing or the layout of what is cached changes, so old files are not
# served as the new.
_VERSION = "1"


@lru_cache(maxsize=64)
def _file_digest(path: Path, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def book_digest(book: Path) -> str:
    """The book file's content digest (read again only when the file changes)."""
    stat = book.stat()
    return _file_digest(book, stat.st_mtime_ns, stat.st_size)


def _digest(*parts: object) -> str:
    joined = "\x1f".join(str(part) for part in (_VERSION, *parts))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()[:32]


def section_containing(chunks: Sequence[Chunk], chunk_id: str) -> Section | None:
    """The section of the table of contents that holds the passage."""
    for section in table_of_contents(chunks):
        if any(chunk.id == chunk_id for chunk in section.chunks):
            return section
    return None


class Views:
    def __init__(self, settings: Settings) -> None:
        self.width = settings.showing.width
        self.cache = FileCache(
            settings.home / "cache" / "pages", int(settings.showing.cache_mb * 2**20)
        )

    def image_tag(self, book: Path, page: int, quote: str | None, width: int) -> str:
        """The name of page `page`'s image drawn `width` wide with the quote, as an ETag."""
        return _digest("image", book_digest(book), page, quote or "", width)

    def page_image(self, book: Path, page: int, quote: str | None, width: int) -> Path:
        """The page as a PNG file, the quote highlighted (drawn once, then kept)."""
        name = self.image_tag(book, page, quote, width) + ".png"
        kept = self.cache.get(name)
        if kept is not None:
            return kept
        png = render_page(book, page, width, self.page_layout(book, page, quote).highlights)
        return self.cache.put(name, png)

    def page_layout(self, book: Path, page: int, quote: str | None) -> PageLayout:
        """The page's size and the quote's boxes on it (found once, then kept)."""
        name = _digest("layout", book_digest(book), page, quote or "") + ".json"
        kept = self.cache.get(name)
        if kept is not None:
            data = json.loads(kept.read_bytes())
            boxes = tuple(Box(**box) for box in data.pop("highlights"))
            return PageLayout(**data, highlights=boxes)
        layout = page_layout(book, page, quote)
        self.cache.put(name, json.dumps(asdict(layout)).encode())
        return layout

    def quote_file(self, game: GameInfo, chunks: Sequence[Chunk], quote: Quote) -> Path:
        """A file showing the quote where it stands: its page with the sentence highlighted
        (a PDF), else its section as HTML with the sentence marked (open it at `#ANCHOR`)."""
        if is_paged(game.path) and quote.page is not None:
            try:
                return self.page_image(game.path, quote.page, quote.text, self.width)
            except QuoteNotFoundError:  # a table the page draws otherwise than it reads
                pass
        section = section_containing(chunks, quote.chunk_id)
        if section is None:
            raise QuoteNotFoundError(f"No passage {quote.chunk_id!r} in {game.title}.")
        page = section_html(section, game.title, quote.text)
        name = _digest("section", page) + ".html"
        return self.cache.get(name) or self.cache.put(name, page.encode("utf-8"))
