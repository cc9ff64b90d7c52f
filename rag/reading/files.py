"""Rulebook files (.txt, .md, .rst, .html, .pdf) and folders of pages flattened to a Document.

What `Document.text` holds: one paragraph per line, no blank lines, whitespace collapsed,
list bullets written "- ", table rows with their cells joined by " | ". Lines starting with
'#' are headings whose level the source states: Markdown, reStructuredText and HTML
headings, and entries of the book's own table of contents, found again in the text and
marked top-level (the contents list itself is removed). Other headings are left for the
chunker to recognise, unless the source marks its headings (Markdown, reStructuredText,
HTML, PDF fonts: `Document.headings_marked`). Lines a source wraps are joined with a space,
but without one between two Chinese (or Japanese) characters, so a sentence reads as
written. Page chrome (RulesPal navigation, the "<title> thumbnail" caption, repeated title
lines, PDF running headers and page numbers) is removed. PDFs get one PageSpan per page.

A folder of pages (.md, .markdown, .rst, .txt, .html, .htm, in any mix: a rules wiki, a
Sphinx site's sources) is one book, each page a top-level section in name order, hidden
files and those under a name starting with '_' (a site's _build, _static) left out. It is
written as one Markdown book: what `rules add` keeps, and what a folder reads as.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import html
import re
import unicodedata
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

from rag.errors import IngestError
from rag.lang import char_columns
from rag.reading.numbering import numbered_rank
from rag.reading.pdf import read_pdf
from rag.types import Document, PageSpan

SUPPORTED_SUFFIXES = (".txt", ".md", ".markdown", ".rst", ".html", ".htm", ".pdf")

_Line = tuple[int, str]  # (page, text); page 0 for formats without pages

# ---------------------------------------------------------------- decoding

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32", "UTF-32LE"),
    (codecs.BOM_UTF32_BE, "utf-32", "UTF-32BE"),
    (codecs.BOM_UTF8, "utf-8-sig", None),
    (codecs.BOM_UTF16_LE, "utf-16", "UTF-16LE"),
    (codecs.BOM_UTF16_BE, "utf-16", "UTF-16BE"),
)
_CJK_TEXT_RE = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")
# What a rulebook is written with: whitespace, Latin letters and punctuation, common Chinese
# characters and their punctuation. Bytes decoded in the wrong byte order land mostly
# elsewhere (rare ideographs, Hangul, private use, unassigned code points).
_PLAIN_TEXT_RE = re.compile(
    r"[\t\n\r\x20-\x7e\u00a0-\u024f\u2000-\u206f\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]"
)
_MIN_PLAIN_SHARE = 0.9


def _decode(data: bytes, path: Path) -> tuple[str, str | None]:
    """The text, and the encoding it was read in when that is not UTF-8: UTF-8 (with or
    without BOM), UTF-16/32 with a BOM, UTF-16 without one, or GB18030 (GBK) Chinese text."""
    for bom, codec, name in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(codec), name
            except UnicodeDecodeError as exc:
                raise IngestError(
                    f"{path} starts with a {name or 'UTF-8'} byte-order mark but is damaged: {exc}."
                ) from exc
    if b"\x00" not in data:  # valid UTF-8 may hold NUL bytes, but no text file does
        with contextlib.suppress(UnicodeDecodeError):
            return data.decode("utf-8"), None
    for guess in (_try_utf16, _try_gb18030):
        if found := guess(data):
            return found
    if b"\x00" in data:
        raise IngestError(
            f"{path} is not a text file (it holds NUL bytes, yet does not read as UTF-16): "
            "it may be binary. Save it as UTF-8 text."
        )
    single = _guess_single_byte(data)
    hint = (
        f"It looks like {single}; convert it with "
        f"`iconv -f {single} -t UTF-8 {path.name} > {path.stem}-utf8{path.suffix}`."
        if single
        else "Its encoding is unknown (or the file is binary); save it as UTF-8 text."
    )
    raise IngestError(f"{path} is not UTF-8 text, nor UTF-16 or GB18030 (Chinese). {hint}")


def _plain_share(text: str) -> float:
    return len(_PLAIN_TEXT_RE.findall(text)) / len(text) if text else 0.0


def _try_utf16(data: bytes) -> tuple[str, str] | None:
    """UTF-16 text without a byte-order mark, in the byte order that reads as text."""
    if len(data) % 2:
        return None
    # A Latin character puts a NUL in its first byte (big-endian) or its second.
    nul_first, nul_second = data[0::2].count(0), data[1::2].count(0)
    orders = [("utf-16-le", "UTF-16LE"), ("utf-16-be", "UTF-16BE")]
    if nul_first != nul_second:
        orders = orders[:1] if nul_second > nul_first else orders[1:]
    readings = []
    for codec, name in orders:
        try:
            text = data.decode(codec)
        except UnicodeDecodeError:
            continue
        readings.append((_plain_share(text), text, name))
    if not readings:
        return None
    share, text, name = max(readings)
    return (text, name) if share >= _MIN_PLAIN_SHARE else None


def _try_gb18030(data: bytes) -> tuple[str, str] | None:
    """Chinese text in GB18030 (or GBK, GB2312, its subsets), if the bytes decode to mostly
    Chinese characters."""
    try:
        text = data.decode("gb18030")
    except UnicodeDecodeError:
        return None
    foreign = [c for c in text if ord(c) > 127]
    chinese = sum(1 for c in foreign if _CJK_TEXT_RE.match(c))
    # Latin-1 bytes can pair up into valid but meaningless GB18030 characters.
    return (text, "GB18030") if chinese >= _MIN_PLAIN_SHARE * len(foreign) else None


def _guess_single_byte(data: bytes) -> str | None:
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        return None
    foreign = [c for c in text if ord(c) > 127]
    return "WINDOWS-1252" if sum(c.isalpha() for c in foreign) >= 0.5 * len(foreign) else None


# ---------------------------------------------------------------- text shared by the readers

_ESCAPABLE = r"[!-/:-@\[-`{-~]"  # ASCII punctuation, which a backslash makes plain text
# A character of a private-use plane, which no rulebook holds, stands for a plain one
# until the markup is gone.
_PROTECTED = 0xF0000
_PROTECTED_RE = re.compile("[\U000f0000-\U000f007f]")
_ENTITY_RE = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")


def _protect(text: str) -> str:
    """ASCII punctuation hidden from the markup patterns (escaped or literal text)."""
    return "".join(chr(_PROTECTED + ord(c)) if re.match(_ESCAPABLE, c) else c for c in text)


def _unprotect(text: str) -> str:
    return _PROTECTED_RE.sub(lambda m: chr(ord(m.group()) - _PROTECTED), text)


def _resolve_entities(text: str) -> str:
    """&amp; &lt; &nbsp; &#160; &#x4e2d; ... as characters; only complete ones, with ';'."""
    return _ENTITY_RE.sub(lambda m: html.unescape(m.group()), text)


def _is_wide(char: str) -> bool:
    """A character set two columns wide: CJK ideographs, kana, full-width punctuation;
    not Korean syllables, whose words are spaced."""
    return unicodedata.east_asian_width(char) in "WF" and not "\uac00" <= char <= "\ud7a3"


def _tight(left: str, right: str) -> bool:
    """No space where a line break falls between two Chinese (or Japanese) characters.

    Characters of ambiguous width ("·", "…", "①") count with a wide neighbour: they sit
    in Chinese sentences ("融合·S·X怪兽", "……", "①：").
    """
    widths = (unicodedata.east_asian_width(left), unicodedata.east_asian_width(right))
    return all(w in "WFA" for w in widths) and (_is_wide(left) or _is_wide(right))


def _join_lines(lines: list[str]) -> str:
    """Wrapped lines as one paragraph: joined with a space, except between Chinese text."""
    text = ""
    for line in (line.strip() for line in lines):
        if line:
            text = f"{text}{line}" if not text or _tight(text[-1], line[0]) else f"{text} {line}"
    return text


def _display_columns(text: str) -> list[tuple[int, str]]:
    """Each character with the column it starts at; wide characters take two columns."""
    columns = []
    column = 0
    for char in text:
        columns.append((column, char))
        column += char_columns(char)
    return columns


# ---------------------------------------------------------------- markdown

_FENCE_RE = re.compile(r"^\s*(```|~~~)")
# CommonMark: closing '#'s only after a space, so "C#" and an escaped "\#" stay in the title.
_ATX_RE = re.compile(r"^(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_SETEXT_RE = re.compile(r"^(=+|-+)\s*$")
_RULE_RE = re.compile(r"^([-*_])(\s*\1){2,}\s*$")
_ITEM_RE = re.compile(r"^\s*(?:[-*+]|(\d+[.)]))\s+(?:\[[ xX]\]\s+)?(.*)$")
_QUOTE_RE = re.compile(r"^\s*(>\s?)+")
_TABLE_SEP_RE = re.compile(r"^(?=.*\|)\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_REF_DEF_RE = re.compile(r"^\s*\[[^\]]+\]:\s*\S+")
_MD_ESCAPE_RE = re.compile(rf"\\({_ESCAPABLE})")
_INLINE_MD: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    (re.compile(r"(`+)(.+?)\1"), lambda m: _protect(m.group(2))),  # code is taken as written
    (re.compile(r"!\[[^\]]*\]\([^)]*\)"), ""),  # images carry no rules text
    (re.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),
    (re.compile(r"\[([^\]]+)\]\[[^\]]*\]"), r"\1"),
    (re.compile(r"<(https?://[^>]+)>"), r"\1"),
    (re.compile(r"</?[A-Za-z][^>]*>"), ""),
    (re.compile(r"(\*\*|__)(.+?)\1"), r"\2"),
    (re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])"), r"\1"),
    (re.compile(r"(?<!\w)_(?=\S)(.+?)(?<=\S)_(?!\w)"), r"\1"),
    (re.compile(r"~~(.+?)~~"), r"\1"),
)


def _inline_markdown(text: str) -> str:
    """Markup removed; backslash escapes and HTML entities resolved to their characters."""
    text = _MD_ESCAPE_RE.sub(lambda m: _protect(m.group(1)), text)
    for pattern, replacement in _INLINE_MD:
        text = pattern.sub(replacement, text)
    return _unprotect(_resolve_entities(text))


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
            out.append(_inline_markdown(_join_lines(paragraph)))
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
            out.append(f"{level} {_inline_markdown(_join_lines(paragraph))}")
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


_MD_HEADING_LINE_RE = re.compile(r"^(#{1,6}) (.*)$")
_MD_ITEM_LINE_RE = re.compile(r"^(- |\d+[.)] )(.*)$")
_MD_ALWAYS_ESCAPED_RE = re.compile(r"[\\`*_\[\]~]|&(?=#?\w+;)|<(?=[A-Za-z/!?])")


def _escape_markdown(text: str, *, heading: bool = False) -> str:
    """Text that Markdown reads back as itself: markup characters escaped, and the first
    one when a line starting with it would be a block (a quote, a rule, a table)."""
    text = _MD_ALWAYS_ESCAPED_RE.sub(lambda m: "\\" + m.group(), text)
    if heading:
        text = text.replace("#", "\\#")
    elif re.match(_ESCAPABLE, text[:1]) and not text.startswith("\\"):
        text = "\\" + text
    return text


def _as_markdown(lines: list[str], *, headings: bool = True) -> list[str]:
    """Lines of a Document (headings, items, paragraphs) as Markdown blocks that read back
    as the same lines: how a folder's .rst, .txt and .html pages join its Markdown book.
    Without `headings` (text pages), a line starting with '#' stays text, and the headings
    are the Chinese numbered lines ("一、总则", "（一）摸牌"), their levels in rank order."""
    cleaned = _clean(lines)
    numbered = {} if headings else _numbered_levels(cleaned)
    blocks = []
    for i, line in enumerate(cleaned):
        if i in numbered:
            blocks.append(f"{'#' * numbered[i]} {_escape_markdown(line, heading=True)}")
        elif headings and (heading := _MD_HEADING_LINE_RE.match(line)):
            blocks.append(f"{heading.group(1)} {_escape_markdown(heading.group(2), heading=True)}")
        elif item := _MD_ITEM_LINE_RE.match(line):
            blocks.append(item.group(1) + _escape_markdown(item.group(2)))
        else:
            blocks.append(_escape_markdown(line))
    return blocks


def _numbered_levels(lines: list[str]) -> dict[int, int]:
    """The numbered heading lines' Markdown levels: the page's highest rank at level 2,
    under the page's title (its first "第一章" is no title of the whole page)."""
    ranks = {i: rank for i, line in enumerate(lines) if (rank := numbered_rank(line)) is not None}
    order = sorted(set(ranks.values()))
    return {i: min(order.index(rank) + 2, 6) for i, rank in ranks.items()}


# ---------------------------------------------------------------- reStructuredText

_RST_ADORNMENT_RE = re.compile(r"^([!-/:-@\[-`{-~])\1{2,}\s*$")  # 3+ of one punctuation mark
_RST_GRID_BORDER_RE = re.compile(r"^\+(?:[-=]+\+)+\s*$")
_RST_GRID_RULE_RE = re.compile(r"^(?=.*\+[-=])[+|][-=+| ]*$")  # a border, or part of one
_RST_SIMPLE_BORDER_RE = re.compile(r"^=+(?: +=+)*\s*$")
_RST_SPAN_RE = re.compile(r"^-+(?: +-+)*\s*$")  # the cells of a simple table's header above
_RST_BULLET_RE = re.compile(r"^[-*+•‣⁃](?: +(?P<text>.*))?$")
_ENUMERATOR = r"\d+|#|[a-zA-Z]|[ivxlcdm]+|[IVXLCDM]+"
_RST_ENUM_RE = re.compile(
    rf"^(?:(?P<number>{_ENUMERATOR})[.)]|\((?P<bracketed>{_ENUMERATOR})\))(?: +(?P<text>.*))?$"
)
_RST_LINE_BLOCK_RE = re.compile(r"^\|(?: +(.*))?$")
_RST_FIELD_RE = re.compile(r"^:([^:`\s][^:`]*):(?: +(.*))?$")
_RST_EXPLICIT_RE = re.compile(r"^\.\.(?: +(.*))?$")
_RST_DIRECTIVE_RE = re.compile(r"^(\|[^|]+\|\s+)?([\w.:+-]+?)::(?: +(.*))?$")
_RST_OPTION_RE = re.compile(r"^:[\w-][\w .-]*:(?: |$)")

# Directives whose content is no rules text: pictures, navigation, settings, page furniture.
_RST_DROPPED = {
    "image", "figure", "toctree", "include", "literalinclude", "raw", "role", "default-role",
    "highlight", "meta", "contents", "sectnum", "section-numbering", "header", "footer",
    "title", "index", "target-notes", "tabularcolumns", "graphviz", "mermaid", "plot",
    "youtube", "video",
}  # fmt: skip
# The argument is the first paragraph of the content (".. note:: Text").
_RST_TEXT_ARGUMENT = {
    "attention", "caution", "danger", "error", "hint", "important", "note", "tip", "warning",
    "seealso", "todo", "centered", "epigraph", "highlights", "pull-quote",
}  # fmt: skip
# The argument is a title, kept as a paragraph of its own.
_RST_TITLE_ARGUMENT = {
    "admonition", "sidebar", "topic", "rubric", "table", "list-table", "csv-table",
}  # fmt: skip
_RST_LITERAL = {"code", "code-block", "sourcecode", "parsed-literal", "math"}

_RST_SPACE = "\U000f0100"  # an escaped space: a markup boundary that reads as nothing
_RST_INLINE = (
    (re.compile(r"(?::[\w.+-]+)+:`([^`]+)`|`([^`]+)`:[\w.+-]+:"), r"\1\2"),  # :role:`text`
    (re.compile(r"_`([^`]+)`"), r"\1"),  # an inline target
    (re.compile(r"`([^`]+)`(?:__?)?"), r"\1"),  # a reference, or interpreted text
    (re.compile(r"\s*\[(?:#[\w.-]*|\*|\d+|[\w.-]+)\]_"), ""),  # footnote references
    (re.compile(r"(?<!\w)\|([^|\s](?:[^|]*[^|\s])?)\|(?:__?)?(?!\w)"), r"\1"),  # |substitution|
    (re.compile(r"\*\*(\S(?:.*?\S)?)\*\*"), r"\1"),
    (re.compile(r"(?<![\w*])\*([^\s*](?:.*?[^\s*])?)\*(?![\w*])"), r"\1"),
    (re.compile(r"(?<=[^\W_])__?(?!\w)"), ""),  # a reference by name: word_
)
_RST_TARGET_RE = re.compile(r"^(.*?)\s*<([^<>]+)>$")


def _rst_inline(text: str) -> str:
    """Inline markup removed: **strong**, *emphasis*, ``literal``, `interpreted`, roles,
    `links <url>`_, footnote references, |substitutions|; backslash escapes resolved."""
    text = re.sub(r"``(\S(?:.*?\S)?)``", lambda m: _protect(m.group(1)), text)
    text = re.sub(r"\\(.|$)", _rst_escape, text)
    text = re.sub(r"`([^`]+)`", lambda m: f"`{_rst_link_text(m.group(1))}`", text)
    for pattern, replacement in _RST_INLINE:
        text = pattern.sub(replacement, text)
    return _unprotect(text.replace(_RST_SPACE, ""))


def _rst_escape(match: re.Match[str]) -> str:
    """A backslash escape: the character as plain text; an escaped space is nothing."""
    char = match.group(1)
    return _protect(char) if char.strip() else _RST_SPACE


def _rst_link_text(text: str) -> str:
    """`Rules <https://…>`: the text; `<https://…>` alone: the address."""
    if target := _RST_TARGET_RE.match(text):
        return target.group(1) or target.group(2)
    return text


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _dedent(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    depth = min((_indent(line) for line in lines if line.strip()), default=0)
    return [line[depth:] for line in lines]


def _indented_block(lines: list[str], start: int) -> tuple[list[str], int]:
    """The indented (and blank) lines from `start` on, dedented, and where they end."""
    end = start
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > 0):
        end += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return _dedent(lines[start:end]), end


def _cut_columns(line: str, starts: list[int]) -> list[str]:
    """A table line cut into cells at display columns: each word in the cell where it
    starts, so that text a little out of line (wide characters) stays whole."""
    cells: list[list[str]] = [[] for _ in starts]
    word: list[str] = []
    word_start = 0
    for column, char in [*_display_columns(line), (10**9, " ")]:
        if char != " ":
            word_start = column if not word else word_start
            word.append(char)
        elif word:
            cell = max((k for k, s in enumerate(starts) if s <= word_start), default=0)
            cells[cell].append("".join(word))
            word = []
    return [" ".join(cell) for cell in cells]


def _table_row(cells: list[str]) -> str:
    """Cells joined by " | " as the Markdown reader joins them, without empty edge cells."""
    texts = [_rst_inline(cell) for cell in cells]
    while texts and not texts[-1].strip():
        texts.pop()
    while texts and not texts[0].strip():
        texts.pop(0)
    return " | ".join(texts)


class _RstReader:
    """reStructuredText as lines. Section levels follow the order in which each adornment
    style (underline, or overline and underline, and their character) first appears."""

    def __init__(self) -> None:
        self.styles: list[tuple[str, str]] = []

    def read(self, text: str) -> list[str]:
        lines = [line.rstrip() for line in text.expandtabs(8).splitlines()]
        return self.blocks(lines, top=True)

    def blocks(self, lines: list[str], *, top: bool = False) -> list[str]:
        out: list[str] = []
        paragraph: list[str] = []
        literal_next = False

        def flush() -> None:
            nonlocal literal_next
            if not paragraph:
                return
            text = _join_lines(paragraph)
            paragraph.clear()
            if text.endswith("::"):  # "Text::" introduces a literal block: "Text:"
                literal_next = True
                text = text[:-2].rstrip() if text[:-2].endswith(" ") or text == "::" else text[:-1]
            if text := _rst_inline(text):
                out.append(text)

        i = 0
        while i < len(lines):
            line = lines[i]
            following = lines[i + 1] if i + 1 < len(lines) else ""
            if not line.strip():
                flush()
                i += 1
                continue
            if _indent(line) > 0:  # a literal block, a block quote, or a definition
                flush()
                block, i = _indented_block(lines, i)
                if literal_next:
                    out.extend(line for line in block if line.strip())
                else:
                    out.extend(self.blocks(block))
                literal_next = False
                continue
            literal_next = False
            if explicit := _RST_EXPLICIT_RE.match(line):
                flush()
                body, i = _indented_block(lines, i + 1)
                out.extend(self.explicit(explicit.group(1) or "", body))
                continue
            if top and (title := self.title(lines, i)):
                flush()
                heading, i = title
                if heading:
                    out.append(heading)
                continue
            if _RST_GRID_BORDER_RE.match(line):
                flush()
                end = i
                while end < len(lines) and lines[end][:1] in ("+", "|"):
                    end += 1
                out.extend(self.grid_table(lines[i:end]))
                i = end
                continue
            if not paragraph and _RST_SIMPLE_BORDER_RE.match(line) and following.strip():
                # The table ends at a border followed by a blank line.
                closing = next(
                    (
                        j
                        for j in range(i + 1, len(lines))
                        if _RST_SIMPLE_BORDER_RE.match(lines[j])
                        and (j + 1 == len(lines) or not lines[j + 1].strip())
                    ),
                    None,
                )
                if closing is not None:
                    out.extend(self.simple_table(lines[i : closing + 1]))
                    i = closing + 1
                    continue
            if _RST_ADORNMENT_RE.match(line):  # a transition, or a stray underline
                flush()
                i += 1
                continue
            if not paragraph and _RST_LINE_BLOCK_RE.match(line):
                end = i + 1
                while end < len(lines) and (
                    _RST_LINE_BLOCK_RE.match(lines[end])
                    or (lines[end].strip() and _indent(lines[end]) > 0)
                ):
                    end += 1
                out.extend(self.line_block(lines[i:end]))
                i = end
                continue
            if not paragraph and (item := self.list_item(lines, i)):
                marker, body, i = item
                inner = self.blocks(body)
                if inner:
                    out.append(marker + inner[0])
                    out.extend(inner[1:])
                continue
            if not paragraph and (field := _RST_FIELD_RE.match(line)):
                body, i = _indented_block(lines, i + 1)
                text = _join_lines([field.group(2) or "", *body])
                # Fields before any text are the file's settings (":tocdepth: 2"): dropped.
                if not top or any(not line.startswith("#") for line in out):
                    out.append(f"{_rst_inline(field.group(1))}: {_rst_inline(text)}")
                continue
            paragraph.append(line)
            i += 1
        flush()
        return out

    def title(self, lines: list[str], i: int) -> tuple[str, int] | None:
        """A section title at line i, as a '#' line, and the line after it; else None."""
        line = lines[i]
        after = lines[i + 1] if i + 1 < len(lines) else ""
        over = _RST_ADORNMENT_RE.match(line)
        if over and i + 2 < len(lines) and after.strip() and not _RST_ADORNMENT_RE.match(after):
            under = _RST_ADORNMENT_RE.match(lines[i + 2])
            if under and under.group(1) == over.group(1):
                return self.heading((over.group(1), under.group(1)), after), i + 3
        under = _RST_ADORNMENT_RE.match(after)
        # Any underline of 3 or more: its length is often off for wide (Chinese) titles.
        if not over and under:
            return self.heading(("", under.group(1)), line), i + 2
        return None

    def heading(self, style: tuple[str, str], text: str) -> str:
        if style not in self.styles:
            self.styles.append(style)
        title = _rst_inline(text.strip())
        level = min(self.styles.index(style) + 1, 6)
        return f"{'#' * level} {title}" if title else ""

    def list_item(self, lines: list[str], i: int) -> tuple[str, list[str], int] | None:
        """A bullet or enumerated list item at line i: its marker, its body and where it ends."""
        line = lines[i]
        bullet = _RST_BULLET_RE.match(line)
        number = None if bullet else _RST_ENUM_RE.match(line)
        if number:
            # "A. Lincoln wrote…" is a paragraph: an item's next line is blank or indented.
            after = lines[i + 1] if i + 1 < len(lines) else ""
            if after.strip() and _indent(after) == 0 and not _RST_ENUM_RE.match(after):
                return None
        match = bullet or number
        if not match:
            return None
        first = match.group("text")
        body, end = _indented_block(lines, i + 1)
        enumerator = number and (number.group("number") or number.group("bracketed"))
        marker = f"{enumerator}. " if enumerator and enumerator.isdigit() else "- "
        return marker, [first, *body] if first else body, end

    def explicit(self, text: str, body: list[str]) -> list[str]:
        """A directive's text, if it holds rules text; comments, targets, footnotes: none."""
        directive = _RST_DIRECTIVE_RE.match(text)
        if not directive or directive.group(1):  # a comment, or a substitution definition
            return []
        name, argument = directive.group(2).lower(), directive.group(3) or ""
        options: dict[str, str] = {}
        key = ""
        while body and (_RST_OPTION_RE.match(body[0]) or (key and _indent(body[0]) > 0)):
            line = body.pop(0)
            if _indent(line) > 0:  # an option's value going on
                options[key] = _join_lines([options[key], line])
            else:
                key, _, value = line[1:].partition(":")
                options[key] = value.strip()
        body = _dedent(body)
        if name in _RST_DROPPED:
            return []
        if name in _RST_LITERAL:
            return [line for line in body if line.strip()]
        if name in _RST_TEXT_ARGUMENT and argument:
            return self.blocks([argument, *body])
        head = [_rst_inline(argument)] if name in _RST_TITLE_ARGUMENT and argument else []
        if name == "list-table":
            return head + self.list_table(body)
        if name == "csv-table":
            header = [options["header"]] if "header" in options else []
            rows = csv.reader([*header, *body], skipinitialspace=True)
            return head + [text for text in map(_table_row, rows) if text]
        return head + self.blocks(body)

    def list_table(self, body: list[str]) -> list[str]:
        rows = []
        i = 0
        while i < len(body):
            item = self.list_item(body, i) if body[i].strip() else None
            if not item:
                i += 1
                continue
            _, row, i = item
            cells = []
            j = 0
            while j < len(row):
                cell = self.list_item(row, j) if row[j].strip() else None
                if not cell:
                    j += 1
                    continue
                _, cell_body, j = cell
                cells.append(" ".join(self.blocks(cell_body)))
            rows.append(_table_row(cells))
        return [row for row in rows if row]

    def line_block(self, lines: list[str]) -> list[str]:
        """'| ' lines: each a line of its own; an indented line continues the one above."""
        texts: list[list[str]] = []
        for line in lines:
            if start := _RST_LINE_BLOCK_RE.match(line):
                texts.append([start.group(1) or ""])
            elif texts:
                texts[-1].append(line)
        return [text for text in (_rst_inline(_join_lines(t)) for t in texts) if text]

    def grid_table(self, lines: list[str]) -> list[str]:
        """+---+ tables row by row: a row's cells are what lies between its '|'s."""
        rows = []
        cells: list[list[str]] = []
        for line in lines:
            if _RST_GRID_RULE_RE.match(line.strip()):
                rows.append(cells)
                cells = []
                continue
            for k, cell in enumerate(line.strip().strip("|").split("|")):
                if k < len(cells):
                    cells[k].append(cell)
                else:
                    cells.append([cell])
        rows.append(cells)
        texts = [_table_row([_join_lines(cell) for cell in row]) for row in rows]
        return [text for text in texts if text]

    def simple_table(self, lines: list[str]) -> list[str]:
        """=== tables row by row: cells cut at the columns of the top border, a row going on
        in lines whose first column is blank, a header cell spanning the columns its
        ----- underline spans."""
        starts = [m.start() for m in re.finditer(r"=+", lines[0])]
        rows: list[tuple[list[str], list[int]]] = []
        for line in lines[1:]:
            if not line.strip() or _RST_SIMPLE_BORDER_RE.match(line):
                continue
            if _RST_SPAN_RE.match(line):
                if rows:
                    rows[-1] = (rows[-1][0], [m.start() for m in re.finditer(r"-+", line)])
                continue
            if rows and len(starts) > 1 and not line[: starts[1]].strip():  # the row goes on
                rows[-1][0].append(line)
            else:
                rows.append(([line], starts))
        texts = []
        for row_lines, columns in rows:
            cut = [_cut_columns(line, columns) for line in row_lines]
            texts.append(_table_row([_join_lines(list(cell)) for cell in zip(*cut, strict=True)]))
        return [text for text in texts if text]


def _rst_lines(text: str) -> list[str]:
    """reStructuredText to lines: titles as '#' lines, directives' text kept as paragraphs
    (pictures, tables of contents, comments, footnotes and targets dropped), lists as '- '
    lines, tables read row by row, markup removed."""
    return _RstReader().read(text)


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
        source_lines = "".join(self._buffer).splitlines()
        text = _join_lines([" ".join(line.split()) for line in source_lines])
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


def _text_lines(text: str) -> list[str]:
    """A text file's lines, with HTML entities (from a page saved as text) resolved."""
    return [_resolve_entities(line) for line in text.splitlines()]


# ---------------------------------------------------------------- folders of pages

_MARKDOWN_SUFFIXES = (".md", ".markdown")
_PAGE_READERS: dict[str, Callable[[str], list[str]]] = {
    ".rst": _rst_lines,
    ".txt": _text_lines,
    ".html": _html_lines,
    ".htm": _html_lines,
}
_PAGE_SUFFIXES = (*_MARKDOWN_SUFFIXES, *_PAGE_READERS)
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


def _folder_pages(folder: Path) -> list[Path]:
    pages = [
        path
        for path in folder.rglob("*")
        if path.is_file()
        and path.suffix.lower() in _PAGE_SUFFIXES
        # Hidden files, and a site's own folders and parts (_build, _static, _Sidebar.md).
        and not any(part.startswith((".", "_")) for part in path.relative_to(folder).parts)
    ]
    return sorted(pages, key=lambda p: _natural_key(p.relative_to(folder)))


def _page_markdown(path: Path) -> tuple[str | None, list[str], str | None]:
    """A page as Markdown lines, the title it gives itself (a first-level heading on its
    first line) taken out of them, and its encoding when it is not UTF-8."""
    text, encoding = _decode(path.read_bytes(), path)
    suffix = path.suffix.lower()
    if suffix in _MARKDOWN_SUFFIXES:
        lines = text.splitlines()
    else:
        lines = [
            line
            for block in _as_markdown(_PAGE_READERS[suffix](text), headings=suffix != ".txt")
            for line in (block, "")
        ]
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    own = _ATX_RE.match(lines[first]) if first is not None else None
    if first is None or not own or own.group(1) != "#":
        return None, lines, encoding
    del lines[first]
    return own.group(2), lines, encoding


def markdown_folder(folder: Path) -> str:
    """A folder of pages as one Markdown book: each page a top-level section, in name order.

    Pages are Markdown, reStructuredText, HTML or text files, in any mix. A page's own
    first-level heading names its section (else its file name does); its other headings
    move under it. Text pages have only Chinese numbered headings. Hidden files and
    folders, and those whose name starts with '_', are skipped.
    """
    return _folder_book(folder)[0]


def _folder_book(folder: Path) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The folder as one Markdown book, and (page, encoding) for each page not in UTF-8."""
    pages = _folder_pages(folder)
    if not pages:
        raise IngestError(
            f"{folder} holds no Markdown files nor other pages to read "
            f"({', '.join(_PAGE_SUFFIXES)}): give a folder of rulebook pages, or the "
            "rulebook file itself."
        )
    parts = []
    encodings = []
    for path in pages:
        own_title, lines, encoding = _page_markdown(path)
        title = own_title or _escape_markdown(_file_title(path), heading=True)
        parts.append("\n".join([f"# {title}", "", *_headings_below_title(lines)]).strip())
        if encoding:
            encodings.append((str(path.relative_to(folder)), encoding))
    return "\n\n".join(parts) + "\n", tuple(encodings)


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
    game: str,
    path: Path,
    pages: list[list[str]],
    *,
    paged: bool,
    marked: bool,
    encodings: tuple[tuple[str, str], ...] = (),
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
        encodings=encodings,
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
    ".md": _markdown_lines,
    ".markdown": _markdown_lines,
    **_PAGE_READERS,
}


def load_document(path: Path, game: str) -> Document:
    """Read and flatten a rulebook file; IngestError says what is wrong and how to fix it."""
    path = Path(path)
    if not path.exists():
        raise IngestError(f"Rulebook file {path} does not exist: check the path.")
    if path.is_dir():
        book, encodings = _folder_book(path)
        lines = _markdown_lines(book)
        return _assemble(game, path, [lines], paged=False, marked=True, encodings=encodings)
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
    text, encoding = _decode(data, path)
    return _assemble(
        game,
        path,
        [_TEXT_FORMATS[suffix](text)],
        paged=False,
        marked=suffix != ".txt",
        encodings=((path.name, encoding),) if encoding else (),
    )
