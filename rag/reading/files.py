"""Rulebook files (.txt, .md, .html, .pdf) and folders of Markdown flattened to a Document.

What `Document.text` holds: one paragraph per line, no blank lines, whitespace collapsed,
list bullets written "- ". Lines starting with '#' are headings whose level the source
states: Markdown and HTML headings, and entries of the book's own table of contents, found
again in the text and marked top-level (the contents list itself is removed). Other
headings are left for the chunker to recognise, unless the source marks its headings
(Markdown, HTML, PDF fonts: `Document.headings_marked`). Page chrome (RulesPal navigation, the
"<title> thumbnail" caption, repeated title lines, PDF running headers and page numbers)
is removed. PDFs get one PageSpan per page.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

from rag.errors import IngestError
from rag.reading.pdf import read_pdf
from rag.types import Document, PageSpan

SUPPORTED_SUFFIXES = (".txt", ".md", ".markdown", ".html", ".htm", ".pdf")

_Line = tuple[int, str]  # (page, text); page 0 for formats without pages

# ---------------------------------------------------------------- decoding

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_CJK_TEXT_RE = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")


def _decode(data: bytes, path: Path) -> str:
    """UTF-8 (with or without BOM), UTF-16/32 with a BOM, or GB18030 Chinese text."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError as exc:
                raise IngestError(
                    f"{path} starts with a {encoding} byte-order mark but is damaged: {exc}."
                ) from exc
    if b"\x00" in data:  # valid UTF-8, but never in a text file
        raise IngestError(
            f"{path} is not a text file (it holds NUL bytes): it may be binary, or UTF-16 "
            "without a byte-order mark. Save it as UTF-8 text."
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        utf8_error = exc
    gb_text = _try_gb18030(data)
    if gb_text is not None:
        return gb_text
    guess = _guess_single_byte(data)
    hint = (
        f"It looks like {guess}; convert it with "
        f"`iconv -f {guess} -t UTF-8 {path.name} > {path.stem}-utf8{path.suffix}`."
        if guess
        else "Its encoding is unknown (or the file is binary); save it as UTF-8 text."
    )
    raise IngestError(f"{path} is not UTF-8 text (bad byte at offset {utf8_error.start}). {hint}")


def _try_gb18030(data: bytes) -> str | None:
    """Chinese text in GB18030/GBK, if the bytes decode to mostly Chinese characters."""
    try:
        text = data.decode("gb18030")
    except UnicodeDecodeError:
        return None
    foreign = [c for c in text if ord(c) > 127]
    chinese = sum(1 for c in foreign if _CJK_TEXT_RE.match(c))
    # Latin-1 bytes can pair up into valid but meaningless GB18030 characters.
    return text if chinese >= 0.9 * len(foreign) else None


def _guess_single_byte(data: bytes) -> str | None:
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        return None
    foreign = [c for c in text if ord(c) > 127]
    return "WINDOWS-1252" if sum(c.isalpha() for c in foreign) >= 0.5 * len(foreign) else None


# ---------------------------------------------------------------- markdown

_FENCE_RE = re.compile(r"^\s*(```|~~~)")
_ATX_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_SETEXT_RE = re.compile(r"^(=+|-+)\s*$")
_RULE_RE = re.compile(r"^([-*_])(\s*\1){2,}\s*$")
_ITEM_RE = re.compile(r"^\s*(?:[-*+]|(\d+[.)]))\s+(?:\[[ xX]\]\s+)?(.*)$")
_QUOTE_RE = re.compile(r"^\s*(>\s?)+")
_TABLE_SEP_RE = re.compile(r"^(?=.*\|)\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_REF_DEF_RE = re.compile(r"^\s*\[[^\]]+\]:\s*\S+")
_INLINE_MD = (
    (re.compile(r"!\[[^\]]*\]\([^)]*\)"), ""),  # images carry no rules text
    (re.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),
    (re.compile(r"\[([^\]]+)\]\[[^\]]*\]"), r"\1"),
    (re.compile(r"<(https?://[^>]+)>"), r"\1"),
    (re.compile(r"</?[A-Za-z][^>]*>"), ""),
    (re.compile(r"(`+)(.+?)\1"), r"\2"),
    (re.compile(r"(\*\*|__)(.+?)\1"), r"\2"),
    (re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])"), r"\1"),
    (re.compile(r"(?<!\w)_(?=\S)(.+?)(?<=\S)_(?!\w)"), r"\1"),
    (re.compile(r"~~(.+?)~~"), r"\1"),
    (re.compile(r"\\([\\`*_{}\[\]()#+\-.!|])"), r"\1"),
)


def _inline_markdown(text: str) -> str:
    for pattern, replacement in _INLINE_MD:
        text = pattern.sub(replacement, text)
    return text


def _markdown_block(line: str) -> str | None:
    """A line that stands alone (heading, list item, table row), converted; else None."""
    if heading := _ATX_RE.match(line):
        return f"{heading.group(1)} {_inline_markdown(heading.group(2))}"
    if item := _ITEM_RE.match(line):
        marker = f"{item.group(1)} " if item.group(1) else "- "
        return marker + _inline_markdown(item.group(2))
    if line.lstrip().startswith("|"):
        cells = [_inline_markdown(c.strip()) for c in line.strip().strip("|").split("|")]
        return " | ".join(cells)
    return None


def _markdown_lines(text: str) -> list[str]:
    """Markdown to lines: paragraphs joined, headings kept as '#' lines, markup removed."""
    out: list[str] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            out.append(_inline_markdown(" ".join(paragraph)))
            paragraph.clear()

    in_code = False
    for raw in text.splitlines():
        if _FENCE_RE.match(raw):
            flush()
            in_code = not in_code
            continue
        if in_code:  # code keeps its lines, without the fences' backticks
            out.append(raw)
            continue
        line = _QUOTE_RE.sub("", raw)
        if not line.strip() or _REF_DEF_RE.match(line) or _TABLE_SEP_RE.match(line):
            flush()
        elif _SETEXT_RE.match(line) and paragraph:
            level = "#" if line.lstrip().startswith("=") else "##"
            out.append(f"{level} {_inline_markdown(' '.join(paragraph))}")
            paragraph.clear()
        elif _RULE_RE.match(line):
            flush()
        elif (block := _markdown_block(line)) is not None:
            flush()
            out.append(block)
        else:
            paragraph.append(line.strip())
    flush()
    return out


_MARKDOWN_SUFFIXES = (".md", ".markdown")
_FIRST_FILES = ("readme", "index")  # a wiki's front page comes first


def _file_title(path: Path) -> str:
    """ "02-playing_the-game.md" -> "Playing the game": the name without its order number."""
    words = re.sub(r"^[\d\s._-]+", "", path.stem).replace("_", " ").replace("-", " ").split()
    title = " ".join(words) or path.stem
    return title[0].upper() + title[1:]


def _natural_key(path: Path) -> tuple[bool, list[tuple[int, str]]]:
    parts = re.split(r"(\d+)", str(path).casefold())
    return path.stem.casefold() not in _FIRST_FILES, [
        (int(p), "") if p.isdigit() else (0, p) for p in parts
    ]


def _headings_below_title(lines: list[str]) -> list[str]:
    """A page's headings shifted so that its highest sits at level 2, under the page title."""
    in_code = False
    headings: dict[int, int] = {}
    for i, line in enumerate(lines):
        if _FENCE_RE.match(line):
            in_code = not in_code
        elif not in_code and (heading := _ATX_RE.match(line)):
            headings[i] = len(heading.group(1))
    shift = 2 - min(headings.values(), default=2)
    return [
        "#" * min(headings[i] + shift, 6) + line.lstrip("#") if i in headings else line
        for i, line in enumerate(lines)
    ]


def markdown_folder(folder: Path) -> str:
    """A folder of Markdown files as one book: each file a top-level section, in name order.

    A file's own first-level heading names its section (else its file name does); its
    other headings move under it.
    """
    files = sorted(
        (p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in _MARKDOWN_SUFFIXES),
        key=lambda p: _natural_key(p.relative_to(folder)),
    )
    if not files:
        raise IngestError(
            f"{folder} holds no Markdown files ({', '.join(_MARKDOWN_SUFFIXES)}): give a "
            "folder of Markdown pages, or the rulebook file itself."
        )
    parts = []
    for path in files:
        lines = _decode(path.read_bytes(), path).splitlines()
        title = _file_title(path)
        first = next((i for i, line in enumerate(lines) if line.strip()), None)
        own = _ATX_RE.match(lines[first]) if first is not None else None
        if first is not None and own and own.group(1) == "#":
            title = own.group(2)
            del lines[first]
        parts.append("\n".join([f"# {title}", "", *_headings_below_title(lines)]).strip())
    return "\n\n".join(parts) + "\n"


# ---------------------------------------------------------------- html

_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_SKIPPED = {"script", "style", "nav", "head", "noscript", "template", "svg"}
_BLOCKS = {
    "p", "div", "br", "li", "ul", "ol", "dl", "dt", "dd", "tr", "table", "section",
    "article", "header", "footer", "main", "aside", "blockquote", "pre", "figure",
    "figcaption", "hr", "body", "details", "summary",
}  # fmt: skip


class _HtmlText(HTMLParser):
    """Collects text: headings as '#' lines, a line break at each block element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self._buffer: list[str] = []
        self._skipping = 0
        self._heading = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self._skipping += 1
        elif tag in _HEADINGS or tag in _BLOCKS:
            self._flush()
            self._heading = _HEADINGS.get(tag, self._heading)
            if tag == "li":
                self._buffer.append("- ")
        elif tag in ("td", "th"):
            self._buffer.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            self._skipping = max(0, self._skipping - 1)
        elif tag in _HEADINGS or tag in _BLOCKS:
            self._flush()

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self._buffer.append(data)

    def _flush(self) -> None:
        text = " ".join("".join(self._buffer).split())
        if text:
            self.lines.append(f"{'#' * self._heading} {text}" if self._heading else text)
        self._buffer.clear()
        self._heading = 0

    def close(self) -> None:
        super().close()
        self._flush()


def _html_lines(text: str) -> list[str]:
    parser = _HtmlText()
    parser.feed(text)
    parser.close()
    return parser.lines


# ---------------------------------------------------------------- normalising

_BULLET_RE = re.compile(r"^[•●▪◦‣·]\s*")
_SENTENCE_FINAL = tuple(".!?:;。！？：；")


def _clean(lines: list[str]) -> list[str]:
    """Whitespace collapsed, bullets written '- ', blank lines dropped."""
    collapsed = (" ".join(unicodedata.normalize("NFC", line).split()) for line in lines)
    return [_BULLET_RE.sub("- ", line).strip() for line in collapsed if line]


def _join_broken(lines: list[str]) -> list[str]:
    """Rejoin hard-wrapped lines: a lone bullet, or a line continued in lowercase."""
    out: list[str] = []
    for line in lines:
        previous = out[-1] if out else ""
        wrapped = (
            len(previous) >= 25 and not previous.endswith(_SENTENCE_FINAL) and line[0].islower()
        )
        if previous == "-" or wrapped:
            out[-1] = f"{previous} {line}"
        else:
            out.append(line)
    return out


# ---------------------------------------------------------------- chrome

_CHROME = {"rulespal", "chat", "rulebook", "rule book"}
# Not plain "Contents": rulebooks use it for the list of components in the box.
_TOC_HEADINGS = {"table of contents", "目录", "目錄"}
_TOC_ENTRY_RE = re.compile(r"^(?:- (?P<item>.+)|(?P<dotted>.+?)\s*\.{3,}\s*\d+)$")
_TITLE_SUFFIXES = (" rulebook", " rule book", " rules")
_HEAD = 12  # title lines sit among the first few lines


def _is_chrome(text: str) -> bool:
    lowered = text.casefold()
    return lowered in _CHROME or lowered.endswith(" thumbnail")


def _drop_title_lines(lines: list[_Line]) -> list[_Line]:
    """Drop the title pair at the head: "X" followed by "X Rulebook" (the page's h1)."""
    texts = [text.casefold() for _, text in lines[:_HEAD]]
    drop: set[int] = set()
    for i, text in enumerate(texts):
        suffix = next((s for s in _TITLE_SUFFIXES if text.endswith(s)), None)
        if suffix and text.removesuffix(suffix) in texts[:i]:
            drop.update(j for j in range(i + 1) if texts[j] in (text.removesuffix(suffix), text))
    return [line for i, line in enumerate(lines) if i not in drop]


def _toc_entry(text: str) -> str | None:
    match = _TOC_ENTRY_RE.match(text)
    return (match.group("item") or match.group("dotted")).strip() if match else None


def _mark_toc(lines: list[_Line]) -> list[_Line]:
    """Remove the table of contents and mark its entries, found later, as '#' headings."""
    start = next((i for i, (_, t) in enumerate(lines) if t.casefold() in _TOC_HEADINGS), None)
    if start is None:
        return lines
    end = start
    while end < len(lines) and lines[end][1].casefold() in _TOC_HEADINGS:
        end += 1
    entries: list[str] = []
    while end < len(lines) and (entry := _toc_entry(lines[end][1])) is not None:
        entries.append(entry.casefold())
        end += 1
    body = lines[:start] + lines[end:]
    # Entries come in book order: search each one after the previous match.
    cursor = start
    for entry in entries:
        found = next((i for i in range(cursor, len(body)) if body[i][1].casefold() == entry), None)
        if found is not None:
            page, text = body[found]
            body[found] = (page, f"# {text}")
            cursor = found + 1
    return body


def _strip_chrome(lines: list[_Line]) -> list[_Line]:
    kept = [(page, text) for page, text in lines if not _is_chrome(text)]
    return _mark_toc(_drop_title_lines(kept))


# ---------------------------------------------------------------- assembly


def _assemble(
    game: str, path: Path, pages: list[list[str]], *, paged: bool, marked: bool
) -> Document:
    cleaned = [_clean(page) for page in pages]
    lines = [
        (number if paged else 0, text)
        for number, page in enumerate(cleaned, start=1)
        for text in _join_broken(page)
    ]
    lines = _strip_chrome(lines)
    if not lines:
        raise IngestError(f"{path} has no rules text (it is empty, or only page chrome).")
    text = "\n".join(t for _, t in lines)
    return Document(
        game=game,
        text=text,
        source=str(path),
        pages=_page_spans(lines, len(text)),
        headings_marked=marked and any(t.startswith("#") for _, t in lines),
    )


def _page_spans(lines: list[_Line], length: int) -> tuple[PageSpan, ...]:
    """Contiguous spans: each page runs from its first line to the next page's first line."""
    starts: list[tuple[int, int]] = []
    offset = 0
    for page, text in lines:
        if page and (not starts or starts[-1][1] != page):
            starts.append((offset, page))
        offset += len(text) + 1
    ends = [start for start, _ in starts[1:]] + [length]
    return tuple(PageSpan(s, e, p) for (s, p), e in zip(starts, ends, strict=False))


_TEXT_FORMATS: dict[str, Callable[[str], list[str]]] = {
    ".txt": str.splitlines,
    ".md": _markdown_lines,
    ".markdown": _markdown_lines,
    ".html": _html_lines,
    ".htm": _html_lines,
}


def load_document(path: Path, game: str) -> Document:
    """Read and flatten a rulebook file; IngestError says what is wrong and how to fix it."""
    path = Path(path)
    if not path.exists():
        raise IngestError(f"Rulebook file {path} does not exist: check the path.")
    if path.is_dir():
        lines = _markdown_lines(markdown_folder(path))
        return _assemble(game, path, [lines], paged=False, marked=True)
    if not path.is_file():
        raise IngestError(f"{path} is not a file: give the rulebook file itself.")
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise IngestError(
            f"Cannot read {path.name}: unsupported file type {suffix or '(none)'!r}. "
            f"Supported: {', '.join(SUPPORTED_SUFFIXES)}."
        )
    if suffix == ".pdf":
        return _assemble(game, path, read_pdf(path), paged=True, marked=True)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IngestError(f"Cannot read {path}: {exc.strerror or exc}.") from exc
    if not data.strip():
        raise IngestError(f"{path} is empty: it holds no rules text.")
    lines = _TEXT_FORMATS[suffix](_decode(data, path))
    return _assemble(game, path, [lines], paged=False, marked=suffix != ".txt")
