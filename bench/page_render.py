"""How long showing a quote on its PDF page takes: drawn the first time, then from the cache.

For each page of each book, the first sentence the page holds is quoted (as an answer
would quote it) and its page image drawn at the default width (`showing.width`) in an
empty cache (a temporary HOME): the sentence found on the page, then the page drawn. Then
it is asked for again, from the cache. The quote's boxes alone (what
`GET /v1/games/{game}/pages/{n}` sends), found in another empty cache, are timed too.

    python bench/page_render.py [--books DIR] [--width PX] [--pages N]

The books are time-bomb.pdf and bangkok.pdf from the real rulebooks' folder
(RULEKEEPER_REAL_RULEBOOKS, default /work/shared/real-rulebooks). The process's first
drawing also loads pdfplumber and PDFium; it is the first row.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from rag.lang import sentence_spans
from rag.reading.chunking import chunk_document
from rag.reading.files import load_document
from rag.settings import load_settings
from rag.showing.views import Views
from rag.types import GameInfo

BOOKS = ("time-bomb.pdf", "bangkok.pdf")
REAL_RULEBOOKS = Path(os.environ.get("RULEKEEPER_REAL_RULEBOOKS", "/work/shared/real-rulebooks"))


def first_sentences(book: Path) -> dict[int, str]:
    """Each page's first quotable sentence, as the chunker and sentence splitter give it."""
    game = GameInfo(book.stem, book.stem, (), "en", "", book, builtin=False)
    found: dict[int, str] = {}
    for chunk in chunk_document(load_document(book, book.stem), game):
        if chunk.page is not None and chunk.page not in found:
            start, end = sentence_spans(chunk.text)[0]
            found[chunk.page] = chunk.text[start:end]
    return found


def timed(call: Callable[[], object]) -> tuple[float, float]:
    """Wall-clock and CPU seconds of the call (on a busy machine the two part)."""
    started, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - started, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--books", type=Path, default=REAL_RULEBOOKS)
    parser.add_argument("--width", type=int, help="Image width; default showing.width.")
    parser.add_argument("--pages", type=int, default=6, help="Pages per book, from the first.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as other:
        settings = load_settings(home=Path(home))
        views, boxes_only = Views(settings), Views(load_settings(home=Path(other)))
        width = args.width or settings.showing.width
        print(f"width {width} px\n")
        print(f"{'book':<15} {'page':>4} {'lines':>5} {'drawn s':>8} {'CPU s':>6} "
              f"{'cached s':>8} {'boxes s':>8} {'PNG KB':>7}")  # fmt: skip
        for name in BOOKS:
            book = args.books / name
            if not book.exists():
                print(f"{name}: not in {args.books}")
                continue
            drawn: list[tuple[float, float]] = []
            for page, quote in sorted(first_sentences(book).items())[: args.pages]:
                image = partial(views.page_image, book, page, quote, width)
                cold, cpu = timed(image)
                cached, _ = timed(image)
                found, _ = timed(partial(boxes_only.page_layout, book, page, quote))
                lines = len(views.page_layout(book, page, quote).highlights)
                size = image().stat().st_size
                drawn.append((cold, cpu))
                print(f"{name:<15} {page:>4} {lines:>5} {cold:>8.3f} {cpu:>6.3f} "
                      f"{cached:>8.4f} {found:>8.3f} {size / 1024:>7.0f}")  # fmt: skip
            walls, cpus = zip(*drawn, strict=True)
            wall, cpu = statistics.median(walls), statistics.median(cpus)
            print(f"{name:<15} drawn: median {wall:.3f} s ({cpu:.3f} s CPU), "
                  f"slowest {max(walls):.3f} s\n")  # fmt: skip


if __name__ == "__main__":
    main()
