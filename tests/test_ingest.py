from pathlib import Path
from typing import Any

import pytest

from rag.errors import IngestError
from rag.reading.chunking import chunk_document
from rag.reading.corpus import Corpus
from rag.reading.files import SUPPORTED_SUFFIXES, load_document
from rag.types import Document, GameInfo

CORPUS = Corpus.load((Path("corpus"), True))
CHROME = ("RulesPal", "Chat", "Rulebook", "Table of Contents")


def _game(path: Path, title: str = "Space Race") -> GameInfo:
    return GameInfo("space-race", title, (), "en", "test", path)


@pytest.fixture(scope="module")
def books() -> dict[str, Document]:
    return {g.slug: load_document(g.path, g.slug) for g in CORPUS.games}


# ---------------------------------------------------------------- the real rulebooks


def test_every_book_loads_without_chrome_or_blank_lines(books: dict[str, Document]) -> None:
    for slug, doc in books.items():
        lines = doc.text.split("\n")
        assert doc.game == slug
        assert all(line and line == " ".join(line.split()) for line in lines), slug
        assert not [line for line in lines if line.removeprefix("# ") in CHROME], slug
        assert "thumbnail" not in doc.text, slug
        assert doc.pages == ()


def test_title_lines_and_contents_list_are_removed(books: dict[str, Document]) -> None:
    deck = books["deck52-final-bus"].text
    assert deck.startswith("# Setup\n1. Remove Map cards")
    assert "DECK 52: Final Bus Rulebook" not in deck
    ma = books["maximum-apocalypse"].text
    assert ma.startswith("# Components\n- 14 Survivor Character cards")
    assert "- Credits" not in ma  # the contents entry, not the section


def test_contents_entries_become_top_level_headings(books: dict[str, Document]) -> None:
    ma = books["maximum-apocalypse"].text.split("\n")
    for heading in ("# Playing the Game", "# 3. Player Actions", "# Glossary", "# Missions 2-3"):
        assert heading in ma
    assert "Move" in ma and "# Move" not in ma  # not in the contents: left to the chunker
    # A book whose contents list is empty keeps its first section.
    assert books["maximum-throwdown-overload"].text.startswith("Components\n- 90 Throwdown")


def test_hard_wrapped_lines_are_rejoined(books: dict[str, Document]) -> None:
    suros = books["suros"].text
    assert "\nAny player can freely move through another player" in suros
    assert "The dead player occupies that space on the map until they are revived.\n" in suros
    # A lone "-" bullet joins the item on the next line.
    assert "\n- Evaluate Active Icons: Look at" in books["maximum-throwdown-overload"].text


# ---------------------------------------------------------------- other formats


def test_markdown_keeps_headings_and_strips_markup(tmp_path: Path) -> None:
    path = tmp_path / "space.md"
    path.write_text(
        "# Space Race\n\nThe **race** is on, see [the site](http://example.com) "
        "![board](board.png)\nand `roll` the *dice*.\n\n"
        "## Setup\n\n* Shuffle the deck.\n* Deal five cards.\n\n"
        "Docking\n-------\n\nDock when you reach a station.\n\n"
        "```\ncode stays\n```\n",
        encoding="utf-8",
    )
    doc = load_document(path, "space-race")
    assert doc.text.split("\n") == [
        "# Space Race",
        "The race is on, see the site and roll the dice.",
        "## Setup",
        "- Shuffle the deck.",
        "- Deal five cards.",
        "## Docking",
        "Dock when you reach a station.",
        "code stays",
    ]
    chunks = chunk_document(doc, _game(path))
    assert [c.section for c in chunks] == [
        ("Space Race",),
        ("Space Race", "Setup"),
        ("Space Race", "Docking"),
    ]
    assert chunks[-1].text == "Dock when you reach a station.\ncode stays"


def test_html_headings_blocks_and_dropped_elements(tmp_path: Path) -> None:
    path = tmp_path / "space.html"
    path.write_text(
        "<html><head><title>Space</title><style>p{}</style></head><body>"
        "<nav>Home | Chat</nav><h1>Space Race</h1><p>Intro &amp; more\n text.</p>"
        "<h2>Turn</h2><ul><li>Draw a card.</li><li>Move.</li></ul>"
        "<script>var x = 1;</script><h3>Move</h3><div>Spend one fuel.<br>Then stop.</div>"
        "</body></html>",
        encoding="utf-8",
    )
    doc = load_document(path, "space-race")
    assert doc.text.split("\n") == [
        "# Space Race",
        "Intro & more text.",
        "## Turn",
        "- Draw a card.",
        "- Move.",
        "### Move",
        "Spend one fuel.",
        "Then stop.",
    ]
    sections = {c.section for c in chunk_document(doc, _game(path))}
    assert ("Space Race", "Turn", "Move") in sections


def _wiki(folder: Path) -> Path:
    """A rules wiki: a front page, numbered pages with and without their own title."""
    folder.mkdir()
    (folder / "README.md").write_text("Pebble Race is a game of throwing.\n", encoding="utf-8")
    (folder / "10-winning.md").write_text(
        "# Winning\n\nThe first empty hand wins.\n\n# Ties\n\nShare it.\n", encoding="utf-8"
    )
    (folder / "2_taking-a-turn.md").write_text(
        "# Your Turn\n\nThrow one pebble.\n\n## Missing\n\nA miss goes back.\n",
        encoding="utf-8",
    )
    (folder / "1-setup.markdown").write_text("Take five pebbles.\n", encoding="utf-8")
    (folder / "cover.png").write_bytes(b"\x89PNG")
    return folder


def test_markdown_folder_is_one_book_a_section_per_file(tmp_path: Path) -> None:
    folder = _wiki(tmp_path / "wiki")
    doc = load_document(folder, "space-race")
    assert doc.headings_marked
    headings = [line for line in doc.text.split("\n") if line.startswith("#")]
    assert headings == ["# README", "# Setup", "# Your Turn", "## Missing", "# Winning", "## Ties"]
    sections = [c.section for c in chunk_document(doc, _game(folder))]
    assert ("Space Race", "Your Turn", "Missing") in sections
    assert ("Space Race", "Winning") in sections


def test_folder_without_markdown_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "a.png").write_bytes(b"\x89PNG")
    with pytest.raises(IngestError, match="no Markdown files"):
        load_document(tmp_path / "pics", "space-race")


def _write_pdf(path: Path) -> None:
    """Three pages with headings, a running header and page numbers."""
    pytest.importorskip("reportlab")
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate

    def furniture(canvas: Any, doc: Any) -> None:
        canvas.drawString(72, 800, "Space Race Rules v2")
        canvas.drawString(300, 30, str(doc.page))

    styles = getSampleStyleSheet()
    body = "Shuffle the deck and deal five cards to each player. " * 6
    story = [
        Paragraph("Setup", styles["Heading1"]),
        Paragraph(body, styles["Normal"]),
        PageBreak(),
        Paragraph("Playing the Game", styles["Heading1"]),
        Paragraph("On your turn draw a card, then move your rocket.", styles["Normal"]),
        PageBreak(),
        Paragraph("Docking", styles["Heading2"]),
        Paragraph("Dock when you reach a station.", styles["Normal"]),
    ]
    SimpleDocTemplate(str(path), pagesize=A4).build(
        story, onFirstPage=furniture, onLaterPages=furniture
    )


def test_pdf_pages_headings_and_wrapped_lines(tmp_path: Path) -> None:
    path = tmp_path / "space.pdf"
    _write_pdf(path)
    doc = load_document(path, "space-race")
    assert [span.page for span in doc.pages] == [1, 2, 3]
    assert "Space Race Rules v2" not in doc.text  # running header
    assert "\n1\n" not in f"\n{doc.text}\n"  # page numbers
    # Lines the PDF wrapped are one paragraph again.
    assert ("Shuffle the deck and deal five cards to each player. " * 6).strip() in doc.text
    chunks = chunk_document(doc, _game(path))
    assert [(c.section, c.page) for c in chunks] == [
        (("Space Race", "Setup"), 1),
        (("Space Race", "Playing the Game"), 2),
        (("Space Race", "Playing the Game", "Docking"), 3),  # a smaller heading nests
    ]
    assert doc.page_at(doc.text.index("Dock when")) == 3


# ---------------------------------------------------------------- encodings


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        ("\ufeffSetup\nShuffle the deck.\n".encode(), None),
        ("Setup\nShuffle the deck.\n".encode("utf-16"), "UTF-16LE"),
        ("Setup\nShuffle the deck.\n".encode("utf-16-le"), "UTF-16LE"),
        ("Setup\nShuffle the deck.\n".encode("utf-16-be"), "UTF-16BE"),
    ],
    ids=["utf-8 BOM", "utf-16 BOM", "utf-16le without BOM", "utf-16be without BOM"],
)
def test_utf16_and_byte_order_marks_are_decoded(
    tmp_path: Path, data: bytes, encoding: str | None
) -> None:
    path = tmp_path / "book.txt"
    path.write_bytes(data)
    doc = load_document(path, "g")
    assert doc.text == "Setup\nShuffle the deck."
    assert doc.encodings == (((path.name, encoding),) if encoding else ())


_CHINESE_BOOK = "一、游戏准备\n将地图板放在桌子中央。\n每位玩家拿五颗石子。\n"
_CHINESE_PARAGRAPHS = _CHINESE_BOOK.strip().split("\n")
_CHINESE_FILES = {
    ".txt": _CHINESE_BOOK,
    ".md": "\n\n".join(_CHINESE_PARAGRAPHS),
    ".html": "".join(f"<p>{paragraph}</p>" for paragraph in _CHINESE_PARAGRAPHS),
}


@pytest.mark.parametrize(
    ("codec", "encoding"),
    [
        ("gbk", "GB18030"),
        ("gb18030", "GB18030"),
        ("utf-16-le", "UTF-16LE"),
        ("utf-16-be", "UTF-16BE"),
    ],
)
@pytest.mark.parametrize("suffix", [".txt", ".md", ".html"])
def test_chinese_text_in_gbk_or_utf16_is_decoded(
    tmp_path: Path, codec: str, encoding: str, suffix: str
) -> None:
    path = tmp_path / f"book{suffix}"
    path.write_bytes(_CHINESE_FILES[suffix].encode(codec))
    doc = load_document(path, "g")
    assert doc.text.split("\n") == _CHINESE_PARAGRAPHS
    assert doc.encodings == ((path.name, encoding),)


def test_utf16_chinese_without_a_latin_character_is_decoded(tmp_path: Path) -> None:
    """No NUL byte tells the byte order: the one that reads as Chinese is taken."""
    path = tmp_path / "book.txt"
    path.write_bytes("将地图板放在桌子中央每位玩家拿五颗石子".encode("utf-16-be"))
    assert load_document(path, "g").text == "将地图板放在桌子中央每位玩家拿五颗石子"


def test_utf8_is_read_without_naming_an_encoding(tmp_path: Path) -> None:
    path = tmp_path / "book.txt"
    path.write_text(_CHINESE_BOOK, encoding="utf-8")
    assert load_document(path, "g").encodings == ()


def test_a_folder_names_each_page_not_in_utf8(tmp_path: Path) -> None:
    folder = tmp_path / "wiki"
    folder.mkdir()
    (folder / "1-setup.txt").write_bytes(_CHINESE_BOOK.encode("gbk"))
    (folder / "2-turn.md").write_text("# 回合\n\n轮流投掷石子。\n", encoding="utf-8")
    (folder / "3-end.html").write_bytes("<h1>结束</h1><p>石子用完即胜。</p>".encode("utf-16"))
    doc = load_document(folder, "g")
    assert doc.encodings == (("1-setup.txt", "GB18030"), ("3-end.html", "UTF-16LE"))
    assert "每位玩家拿五颗石子。" in doc.text and "石子用完即胜。" in doc.text


# ---------------------------------------------------------------- bad input


def _error(path: Path) -> str:
    with pytest.raises(IngestError) as info:
        load_document(path, "g")
    return str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    assert "does not exist" in _error(tmp_path / "nope.txt")


@pytest.mark.parametrize("content", [b"", b"  \n\n\t\n"], ids=["empty", "blank"])
def test_empty_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "book.txt"
    path.write_bytes(content)
    assert "is empty" in _error(path)


def test_file_of_only_chrome(tmp_path: Path) -> None:
    path = tmp_path / "book.txt"
    path.write_text("RulesPal\nChat\nRulebook\n\n", encoding="utf-8")
    assert "no rules text" in _error(path)


def test_unknown_extension_lists_supported_ones(tmp_path: Path) -> None:
    path = tmp_path / "book.docx"
    path.write_bytes(b"PK\x03\x04")
    message = _error(path)
    assert "'.docx'" in message
    assert all(suffix in message for suffix in SUPPORTED_SUFFIXES)


def test_non_utf8_garbage(tmp_path: Path) -> None:
    path = tmp_path / "book.txt"
    path.write_bytes(bytes(range(128, 256)) * 4)
    message = _error(path)
    assert str(path) in message and "save it as UTF-8" in message
    assert "not UTF-8 text, nor UTF-16 or GB18030" in message


def test_latin1_text_names_its_probable_encoding(tmp_path: Path) -> None:
    path = tmp_path / "book.txt"
    path.write_bytes("Café crème: the rules.\n".encode("cp1252"))
    message = _error(path)
    assert "WINDOWS-1252" in message and "iconv" in message


def test_binary_bytes_with_nuls_are_not_text(tmp_path: Path) -> None:
    path = tmp_path / "book.md"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00\xff\xfe\x08\x06")
    message = _error(path)
    assert str(path) in message and "NUL bytes" in message and "UTF-16" in message


@pytest.mark.parametrize(
    "content",
    [b"%PDF-1.4\nthis is not really a pdf\n%%EOF", b"just some text named .pdf"],
    ids=["damaged", "not a pdf"],
)
def test_corrupt_pdf(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "book.pdf"
    path.write_bytes(content)
    message = _error(path)
    assert "Cannot read PDF" in message and "corrupt" in message


def test_truncated_pdf(tmp_path: Path) -> None:
    good = tmp_path / "good.pdf"
    _write_pdf(good)
    path = tmp_path / "book.pdf"
    path.write_bytes(good.read_bytes()[:400])
    assert "Cannot read PDF" in _error(path)
