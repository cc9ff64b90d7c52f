"""What was read from an added rulebook, and warnings when the reading looks wrong.

Its length is told as a reader of its language counts it: words in English, characters in
Chinese (a Chinese sentence has no spaces to count words by). A file that is not UTF-8 was
read in a guessed encoding, which the report names. Three failures leave a rulebook that
answers badly without any error:

- little text for its pages: a scanned PDF has pictures of pages, not text (OCR fixes it);
- one section holding most of the text: its headings were not found, so every answer
  quotes from one long run of passages;
- mostly symbols: the text came out garbled (fonts without a character map).

Thresholds were set against the built-in books and the real PDFs in
shared/real-rulebooks/: real text has 93-97% letters among its printed characters, its pages
(covers aside) carry 200+ characters, and its largest section holds at most a fifth of the
text where the headings are found (Bangkok's, with four headings missed, holds 66%).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rag.lang import CJK_RE, count_tokens, detect_lang, sentence_spans
from rag.types import Chunk, Document, IngestReport, IngestWarning

# A page with less text than this (a page number, a caption) is taken as a picture.
_MIN_PAGE_CHARS = 50
# Below this share of pages with text, the PDF is taken as scanned.
_MIN_TEXT_PAGES = 0.5
# Past this share of the text in one section, the headings are taken as not found...
_MAX_SECTION_SHARE = 0.5
# ...in a rulebook this long: a short rules summary may rightly have no headings.
_MIN_WORDS_FOR_SECTIONS = 500
# Below this share of letters among the printed characters, the text is taken as garbled.
_MIN_LETTER_SHARE = 0.6


def page_count(path: Path) -> int | None:
    """A PDF's pages, the ones without text included (a Document names only pages with
    text); None for formats without pages."""
    if path.suffix.lower() != ".pdf":
        return None
    import pdfplumber

    with pdfplumber.open(path) as pdf:
        return len(pdf.pages)


def ingest_report(document: Document, chunks: Sequence[Chunk], pages: int | None) -> IngestReport:
    """The counts `rules add` shows for a rulebook, and what looks wrong in them."""
    words = count_tokens(document.text)
    warnings = [
        warning
        for warning in (
            _encoding(document),
            _little_text(document, pages),
            _one_section(document, chunks, words),
            _symbols(document),
        )
        if warning
    ]
    # A glossary counts as one section, not one per entry.
    sections = {c.section if c.kind == "section" else c.section[:-1] for c in chunks}
    return IngestReport(
        game=document.game,
        pages=pages,
        sections=len(sections),
        sentences=_sentences(chunks),
        passages=len(chunks),
        words=words,
        characters=len(CJK_RE.findall(document.text)),
        language=detect_lang(document.text),
        warnings=tuple(warnings),
    )


def _sentences(chunks: Sequence[Chunk]) -> int:
    """The sentences of the passages' text (headings not counted), each once though
    neighbouring passages of a long section share some."""
    spans = {
        (chunk.start + start, chunk.start + end)
        for chunk in chunks
        for start, end in sentence_spans(chunk.text)
    }
    return len(spans)


def _encoding(document: Document) -> IngestWarning | None:
    if not document.encodings:
        return None
    read = ", ".join(f"{name} as {encoding}" for name, encoding in document.encodings)
    return IngestWarning(
        "encoding",
        f"Not UTF-8: read {read}. If its text looks wrong (`rules show {document.game}`), "
        "save it as UTF-8 and add it again.",
    )


def _little_text(document: Document, pages: int | None) -> IngestWarning | None:
    if not pages:
        return None
    chars: Counter[int] = Counter()
    for span in document.pages:
        chars[span.page] += span.end - span.start
    with_text = sum(1 for n in chars.values() if n >= _MIN_PAGE_CHARS)
    if with_text >= pages * _MIN_TEXT_PAGES:
        return None
    return IngestWarning(
        "little_text",
        f"Only {with_text} of its {pages} pages have text: it looks like a scanned PDF, "
        "whose pages are pictures. Run OCR on it (e.g. ocrmypdf) and add the result.",
    )


def _one_section(document: Document, chunks: Sequence[Chunk], words: int) -> IngestWarning | None:
    if words < _MIN_WORDS_FOR_SECTIONS or not document.text:
        return None
    spans: dict[tuple[str, ...], tuple[int, int]] = {}
    for chunk in chunks:
        start, end = spans.get(chunk.section, (chunk.start, chunk.end))
        spans[chunk.section] = (min(start, chunk.start), max(end, chunk.end))
    section, (start, end) = max(spans.items(), key=lambda item: item[1][1] - item[1][0])
    share = (end - start) / len(document.text)
    if share <= _MAX_SECTION_SHARE:
        return None
    return IngestWarning(
        "one_section",
        f"{share:.0%} of the text sits in one section ({' › '.join(section)}): its headings "
        "were probably not found, so answers will quote long runs of it. A text or Markdown "
        "version with its headings marked ('# Setup') reads better.",
    )


def _symbols(document: Document) -> IngestWarning | None:
    printed = [ch for ch in document.text if not ch.isspace()]
    if not printed:
        return None
    share = sum(ch.isalpha() for ch in printed) / len(printed)
    if share >= _MIN_LETTER_SHARE:
        return None
    return IngestWarning(
        "symbols",
        f"Only {share:.0%} of its characters are letters: the text looks garbled (a PDF "
        "whose fonts lack a character map?). Try another export of the rulebook, or a text "
        "version.",
    )
