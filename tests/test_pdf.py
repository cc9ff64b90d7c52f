"""PDF reading: PDFs built here with reportlab, and the real rulebooks when they are at hand."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from rag.errors import IngestError
from rag.reading.chunking import chunk_document
from rag.reading.files import load_document
from rag.reading.pdf import read_pdf
from rag.types import GameInfo

pytest.importorskip("reportlab")
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen.canvas import Canvas

WIDTH, HEIGHT = A4
REAL_RULEBOOKS = Path(
    os.environ.get("RULEKEEPER_REAL_RULEBOOKS", Path(__file__).parents[2] / "shared/real-rulebooks")
)

Page = Callable[[Canvas], None]


def _pdf(path: Path, *pages: Page, outline: list[tuple[str, int, int]] | None = None) -> Path:
    """A PDF with one page per drawing function; outline: (title, level, page) bookmarks."""
    canvas = Canvas(str(path), pagesize=A4)
    for number, draw in enumerate(pages, start=1):
        draw(canvas)
        for i, (title, level, page) in enumerate(outline or []):
            if page == number:
                canvas.bookmarkPage(f"b{i}")
                canvas.addOutlineEntry(title, f"b{i}", level=level)
        canvas.showPage()
    canvas.save()
    return path


def _lines(canvas: Canvas, x: float, top: float, lines: list[str], size: float = 11) -> None:
    canvas.setFont("Times-Roman", size)
    for i, line in enumerate(lines):
        canvas.drawString(x, HEIGHT - top - i * size * 1.25, line)


def _heading(canvas: Canvas, x: float, top: float, text: str, size: float = 18) -> None:
    canvas.setFont("Times-Bold", size)
    canvas.drawString(x, HEIGHT - top, text)


def _body(pages: list[list[str]]) -> list[str]:
    return [line for page in pages for line in page]


def test_two_columns_are_read_column_by_column(tmp_path: Path) -> None:
    left = [
        "Left column opens the rules and it",
        "keeps going down the page until the",
        "end of the left column text.",
    ]
    right = [
        "Right column comes second and it",
        "keeps going down the page until the",
        "end of the right column text.",
    ]

    def page(canvas: Canvas) -> None:
        _heading(canvas, 60, 60, "A Title Across The Page")
        _lines(canvas, 60, 100, left * 3)
        _lines(canvas, 320, 100, right * 3)
        _lines(
            canvas,
            60,
            400,
            ["A closing note runs across the whole page width, under both columns here."],
        )

    text = "\n".join(_body(read_pdf(_pdf(tmp_path / "cols.pdf", page))))
    assert text.index("Left column opens") < text.index("Right column comes")
    assert text.index("end of the left column text") < text.index("Right column comes")
    assert text.index("end of the right column text") < text.index("A closing note")
    assert "the Right" not in text and "text. Right" not in text  # no line spliced across


def test_a_column_longer_than_the_other_is_read_in_its_place(tmp_path: Path) -> None:
    left = ["The left column runs on longer than", "the right column, and its last lines"]
    right = ["Right column opens here and it", "ends before the left column does."]

    def page(canvas: Canvas) -> None:
        _lines(canvas, 60, 100, left * 3 + ["sit under where the right one ends."])
        _lines(canvas, 320, 100, right * 3)
        _lines(canvas, 60, 400, ["A note far below, on the left."])

    text = "\n".join(_body(read_pdf(_pdf(tmp_path / "long.pdf", page))))
    assert text.index("sit under where the right one ends") < text.index("Right column opens")
    assert text.index("ends before the left column does") < text.index("A note far below")

    def higher(canvas: Canvas) -> None:  # the right column starts a line above the left
        _lines(canvas, 60, 100 + 11 * 1.25, left * 3)
        _lines(canvas, 320, 100, right * 3 + ["and its first line sits alone."])

    text = "\n".join(_body(read_pdf(_pdf(tmp_path / "higher.pdf", higher))))
    assert text.index("The left column runs on") < text.index("Right column opens")


def test_running_headers_and_page_numbers_are_dropped(tmp_path: Path) -> None:
    def page(n: int) -> Page:
        def draw(canvas: Canvas) -> None:
            _lines(canvas, 60, 30, ["Space Race Rules v2"], size=9)
            _lines(canvas, 60, 120, [f"Rules text of page {n} sits in the middle of it."])
            _lines(canvas, WIDTH / 2, HEIGHT - 30, [str(n)], size=9)

        return draw

    pages = read_pdf(_pdf(tmp_path / "chrome.pdf", page(1), page(2), page(3)))
    assert pages == [[f"Rules text of page {n} sits in the middle of it."] for n in (1, 2, 3)]


def _hyphenated(canvas: Canvas) -> None:
    _lines(
        canvas,
        60,
        100,
        ["Each player draws a card and then discov-", "ers what the top card of the deck is."],
    )


def test_hyphenated_line_ends_are_joined(tmp_path: Path) -> None:
    assert _body(read_pdf(_pdf(tmp_path / "hyphen.pdf", _hyphenated))) == [
        "Each player draws a card and then discovers what the top card of the deck is."
    ]


def test_gold_evidence_is_checked_against_a_pdf_book(tmp_path: Path) -> None:
    """A gold file about a book added with `rules add` is validated against the home's books
    folder: the PDF read as `rules add` reads it (a hyphenated line end joined)."""
    from eval.validate_gold import validate_gold

    book = tmp_path / "books" / "hyphen-game"
    book.mkdir(parents=True)
    _pdf(book / "rulebook.pdf", _hyphenated)
    (book / "manifest.toml").write_text(
        'title = "Hyphen Game"\nslug = "hyphen-game"\nfile = "rulebook.pdf"\n', encoding="utf-8"
    )
    item = {
        "id": "draw-en", "game": "Hyphen Game", "question": "what do I draw?", "lang": "en",
        "answerable": True, "answer": "A card.", "key_facts": [["card"]], "type": "lookup",
    }  # fmt: skip
    gold = tmp_path / "gold.jsonl"
    found = {**item, "evidence": ["then discovers what the top card"]}
    missing = {**item, "id": "peek-en", "evidence": ["then peeks at the bottom card"]}
    gold.write_text("\n".join(json.dumps(i) for i in (found, missing)) + "\n", encoding="utf-8")
    problems = validate_gold(gold, tmp_path / "books")
    assert problems == ["line 2 (peek-en): evidence not found in rulebook of hyphen-game: "
                        "'then peeks at the bottom card'"]  # fmt: skip


def test_drop_capital_is_rejoined_to_its_word(tmp_path: Path) -> None:
    def page(canvas: Canvas) -> None:
        canvas.setFont("Times-Roman", 30)
        canvas.drawString(60, HEIGHT - 114, "L")  # two lines tall, on the second baseline
        _lines(
            canvas,
            90,
            100,
            ["ondon, 1890. Big Ben sits proudly atop the", "tower, and the story begins here."],
        )
        _lines(canvas, 60, 140, ["The rest of the paragraph runs at full width below it."])

    text = " ".join(_body(read_pdf(_pdf(tmp_path / "dropcap.pdf", page))))
    assert text.startswith("London, 1890. Big Ben")
    assert " L " not in f" {text} "


def test_a_table_is_read_cell_by_cell(tmp_path: Path) -> None:
    """A header whose cells take two lines is read down each cell, not across the page; a
    row of numbers keeps its cells apart. Prose above it is read as before."""

    def page(canvas: Canvas) -> None:
        prepare = "Prepare the Role cards according to the number of players."
        _lines(canvas, 60, 40, ["Setup takes a few minutes.", "Sort the cards by type.", prepare])
        canvas.setFont("Times-Roman", 9)
        for x, cell in ((60, ["Number of", "players"]), (150, ["Sherlock", "Team"]),
                        (230, ["Moriarty", "Team"])):  # fmt: skip
            for i, text in enumerate(cell):
                canvas.drawString(x, HEIGHT - 120 - i * 10, text)
        for i, row in enumerate((("4-5", "3", "2"), ("6", "4", "2"))):
            for x, text in zip((60, 150, 230), row, strict=True):
                canvas.drawString(x, HEIGHT - 145 - i * 22, text)

    assert _body(read_pdf(_pdf(tmp_path / "table.pdf", page))) == [
        "Setup takes a few minutes.",
        "Sort the cards by type.",
        "Prepare the Role cards according to the number of players.",
        "Number of players | Sherlock Team | Moriarty Team",
        "4-5 | 3 | 2",
        "6 | 4 | 2",
    ]


def test_a_stretched_line_of_prose_is_not_read_as_a_table_header(tmp_path: Path) -> None:
    def page(canvas: Canvas) -> None:
        canvas.setFont("Times-Roman", 11)
        canvas.drawString(60, HEIGHT - 100, "At the end of each round every player")
        canvas.drawString(300, HEIGHT - 100, "discards down to")
        canvas.drawString(60, HEIGHT - 114, "five cards.")

    assert _body(read_pdf(_pdf(tmp_path / "stretched.pdf", page))) == [
        "At the end of each round every player discards down to five cards."
    ]


def test_headings_come_from_font_size_and_weight(tmp_path: Path) -> None:
    def page(canvas: Canvas) -> None:
        _heading(canvas, 60, 60, "Playing the Game", size=20)
        _lines(canvas, 60, 90, ["On your turn you take two actions."])
        _heading(canvas, 60, 130, "Moving", size=14)
        _lines(canvas, 60, 150, ["Move up to three spaces."])
        canvas.setFont("Times-Bold", 11)
        canvas.drawString(60, HEIGHT - 190, "Stealth test")
        _lines(canvas, 60, 205, ["Roll the two dice."])
        _lines(canvas, 60, 240, ["A Title Case Line In Plain Body Text"])

    path = _pdf(tmp_path / "headings.pdf", page)
    assert _body(read_pdf(path)) == [
        "# Playing the Game",
        "On your turn you take two actions.",
        "## Moving",
        "Move up to three spaces.",
        "### Stealth test",
        "Roll the two dice.",
        "A Title Case Line In Plain Body Text",
    ]
    game = GameInfo("g", "G", (), "en", "test", path)
    sections = [c.section for c in chunk_document(load_document(path, "g"), game)]
    assert ("G", "Playing the Game", "Moving", "Stealth test") in sections
    # A plain line shaped like a heading is not guessed to be one when fonts mark headings.
    assert all("A Title Case Line In Plain Body Text" not in s for s in sections)


def test_bookmarks_set_heading_levels(tmp_path: Path) -> None:
    def page_one(canvas: Canvas) -> None:
        _heading(canvas, 60, 60, "Setup", size=14)
        _lines(canvas, 60, 90, ["Shuffle the deck."])

    def page_two(canvas: Canvas) -> None:
        _heading(canvas, 60, 60, "Dealing", size=14)  # same font as Setup, a level below it
        _lines(canvas, 60, 90, ["Deal five cards."])

    path = _pdf(
        tmp_path / "bookmarks.pdf", page_one, page_two, outline=[("Setup", 0, 1), ("Dealing", 1, 2)]
    )
    assert _body(read_pdf(path)) == [
        "# Setup",
        "Shuffle the deck.",
        "## Dealing",
        "Deal five cards.",
    ]


def test_a_page_of_only_images_says_to_run_ocr(tmp_path: Path) -> None:
    def page(canvas: Canvas) -> None:
        canvas.rect(50, 50, 400, 600, fill=1)

    with pytest.raises(IngestError, match="OCR"):
        read_pdf(_pdf(tmp_path / "scan.pdf", page))


# ---------------------------------------------------------------- the real rulebooks


def _real(name: str) -> Path:
    path = REAL_RULEBOOKS / name
    if not path.exists():
        pytest.skip(f"{path} is not here (set RULEKEEPER_REAL_RULEBOOKS)")
    return path


def _texts(name: str) -> list[str]:
    return _body(read_pdf(_real(name)))


def test_time_bomb_reads_as_printed() -> None:
    lines = _texts("time-bomb.pdf")
    text = "\n".join(lines)
    assert lines[1].startswith(
        "London, 1890. Big Ben sits proudly atop Elizabeth Tower"
    )  # drop cap
    assert "# Setup" in lines and "# End of the Game" in lines
    assert "### Role cards" in lines and "#### Safe Wire" in lines
    assert not any(line.isdigit() for line in lines)  # page numbers
    assert "Shuffle the Wire cards and deal five face down to each player." in text


def test_bangkok_columns_and_ligatures() -> None:
    lines = _texts("bangkok.pdf")
    text = "\n".join(lines)
    assert "frst" not in text and "the first player" in text and "a sequence of five" in text
    assert "different colour" in text
    # The left column's heading and text come before the right column's.
    assert text.index("# Game Setup") < text.index("# Game Play – Setting the goals of a round")
    assert text.index("Pick the starting player at random.") > text.index("# Game Play")
    # The left column's last line, under the right column's end, closes the Setup.
    assert "Choose one of the remaining marker sets. They'll be used as turn markers." in text
