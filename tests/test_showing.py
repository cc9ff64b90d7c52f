"""Showing the rulebook (rag.showing): a quote's boxes on its PDF page, compared with the
characters pdfplumber finds there; page images; a section as HTML; the bounded cache."""

from __future__ import annotations

import json
import os
import re
import webbrowser
from collections.abc import Callable, Sequence
from io import BytesIO
from pathlib import Path
from typing import Any

import pdfplumber
import pytest
from PIL import Image
from test_pdf import HEIGHT, REAL_RULEBOOKS, Canvas, _hyphenated, _lines, _pdf
from typer.testing import CliRunner, Result

from cli.main import app
from cli.state import CliState
from rag.contents import Section, table_of_contents
from rag.lang import sentence_spans
from rag.pipeline import Pipeline
from rag.reading.chunking import chunk_document
from rag.reading.files import load_document
from rag.settings import Settings
from rag.showing import views as views_module
from rag.showing.cache import FileCache
from rag.showing.finding import NoPagesError, PageNotFoundError, QuoteNotFoundError
from rag.showing.pages import Box, PageLayout, page_layout, render_page
from rag.showing.sections import section_html
from rag.showing.views import Views
from rag.types import GameInfo, Quote

LEFT = [
    "Setup begins with the board in the middle of",
    "the table. Each player takes three red cubes",
    "and places them on the start space before the",
    "first round begins. The youngest player goes",
    "first, and play passes to the left after each",
    "turn ends. On your turn you may move one cube",
    "up to three spaces along the marked track, or",
    "you may trade a card with the market. When a",
    "cube reaches the final space of the track it",
]
RIGHT = [
    "scores two points and goes back to the start",
    "space, ready to run again on a later turn. The",
    "game ends after the tenth round, and whoever",
    "has the most points then wins the race. Ties",
    "go to the player with more cubes still on the",
    "track, and then to the younger of those tied.",
    "Keep the points on the score pad by the board",
    "so that every player can see them at a glance",
    "during the whole of the game until the end.",
]
GUTTER = 300  # between the columns drawn at x 60 and 320
WRAPPING = (
    "Each player takes three red cubes and places them on the start space before the first "
    "round begins."
)
ACROSS_COLUMNS = (
    "When a cube reaches the final space of the track it scores two points and goes back to "
    "the start space, ready to run again on a later turn."
)
HEADER = "Number of players | Red Team | Blue Team"


def _columns(canvas: Canvas) -> None:
    _lines(canvas, 60, 100, LEFT)
    _lines(canvas, 320, 100, RIGHT)


def _table(canvas: Canvas) -> None:
    """Prose naming "the number of players" above a header whose cells take two lines."""
    _lines(canvas, 60, 40, ["Count the number of players before you deal the cards."])
    canvas.setFont("Times-Roman", 9)
    for x, cell in (
        (60, ["Number of", "players"]),
        (150, ["Red", "Team"]),
        (230, ["Blue", "Team"]),
    ):
        for i, text in enumerate(cell):
            canvas.drawString(x, HEIGHT - 120 - i * 10, text)
    for x, text in zip((60, 150, 230), ("2-3", "1", "2"), strict=True):
        canvas.drawString(x, HEIGHT - 145, text)


def race_pdf(path: Path) -> Path:
    """A rulebook of two pages: two columns of prose; a table under a line of prose."""
    return _pdf(path, _columns, _table)


@pytest.fixture(scope="module")
def book(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return race_pdf(tmp_path_factory.mktemp("showing") / "race.pdf")


def _inside(book: Path, layout: PageLayout) -> list[str]:
    """Per box, the characters pdfplumber finds with their centre in it, left to right."""
    with pdfplumber.open(book) as pdf:
        chars = pdf.pages[layout.page - 1].chars
    found = []
    for box in layout.highlights:
        x0, x1 = box.x0 * layout.width, box.x1 * layout.width
        top, bottom = box.top * layout.height, box.bottom * layout.height

        def within(c: dict[str, Any], x0: float = x0, x1: float = x1, top: float = top,
                   bottom: float = bottom) -> bool:  # fmt: skip
            x, y = (c["x0"] + c["x1"]) / 2, (c["top"] + c["bottom"]) / 2
            return x0 <= x <= x1 and top <= y <= bottom

        found.append("".join(c["text"] for c in sorted(chars, key=lambda c: c["x0"]) if within(c)))
    return found


def _spaceless(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_a_sentence_wrapping_lines_gets_a_box_on_each_line_over_its_characters(
    book: Path,
) -> None:
    layout = page_layout(book, 1, WRAPPING)
    assert (layout.page, layout.pages) == (1, 2)
    inside = _inside(book, layout)
    assert inside == [
        "Each player takes three red cubes",
        "and places them on the start space before the",
        "first round begins.",
    ]
    assert all(0 <= v <= 1 for box in layout.highlights for v in vars(box).values())


def test_a_sentence_running_into_the_second_column_is_boxed_in_both(book: Path) -> None:
    layout = page_layout(book, 1, ACROSS_COLUMNS)
    inside = _inside(book, layout)
    assert _spaceless("".join(inside)) == _spaceless(ACROSS_COLUMNS)
    columns = ["right" if box.x0 * layout.width > GUTTER else "left" for box in layout.highlights]
    assert columns == ["left", "left", "right", "right"]


def test_a_word_hyphenated_at_a_line_end_is_found_as_printed(tmp_path: Path) -> None:
    book = _pdf(tmp_path / "hyphen.pdf", _hyphenated)
    sentence = load_document(book, "h").text  # "…then discovers what…": the hyphen joined
    layout = page_layout(book, 1, sentence)
    assert _inside(book, layout) == [
        "Each player draws a card and then discov-",
        "ers what the top card of the deck is.",
    ]


def test_a_table_header_read_down_its_cells_is_boxed_on_the_table(book: Path) -> None:
    layout = page_layout(book, 2, HEADER)
    inside = [_spaceless(line) for line in _inside(book, layout)]
    assert inside == ["NumberofRedBlue", "playersTeamTeam"]  # not the prose above


def test_a_page_past_the_book_or_a_quote_not_on_it_is_refused(book: Path, tmp_path: Path) -> None:
    for page in (0, 3):
        with pytest.raises(PageNotFoundError, match="the book has 2 pages"):
            page_layout(book, page)
    with pytest.raises(QuoteNotFoundError, match="not on page 2"):
        page_layout(book, 2, WRAPPING)
    with pytest.raises(QuoteNotFoundError):
        page_layout(book, 1, "…")  # no letters: nothing to find
    text = tmp_path / "rules.md"
    text.write_text("# Rules\n\nPlay well.\n", encoding="utf-8")
    with pytest.raises(NoPagesError):
        page_layout(text, 1)


def test_the_image_is_as_wide_as_asked_and_tinted_only_under_the_boxes(book: Path) -> None:
    layout = page_layout(book, 1, WRAPPING)
    plain, marked = render_page(book, 1, 600), render_page(book, 1, 600, layout.highlights)
    before, after = (Image.open(BytesIO(png)).convert("RGB") for png in (plain, marked))
    assert before.size == after.size and after.width == 600
    box = layout.highlights[0]
    middle = (int((box.x0 + box.x1) / 2 * 600), int((box.top + box.bottom) / 2 * after.height))
    # Sample a run of pixels along the box's middle: paper in it turns amber.
    run = [(middle[0] + dx, middle[1]) for dx in range(-20, 20)]
    assert any(after.getpixel(p) != before.getpixel(p) for p in run)
    assert all(after.getpixel(p)[2] <= before.getpixel(p)[2] for p in run)  # less blue: amber
    far = (int(box.x0 * 600) // 2, int(box.bottom * after.height) + 40)  # margin, lower down
    assert after.getpixel(far) == before.getpixel(far)


def _real(name: str) -> Path:
    path = REAL_RULEBOOKS / name
    if not path.exists():
        pytest.skip(f"{path} is not here (set RULEKEEPER_REAL_RULEBOOKS)")
    return path


def test_real_books_a_second_column_ligature_and_a_drop_capital() -> None:
    bangkok = _real("bangkok.pdf")
    quote = (
        "If there are more dice with the same value, place all the ones with unique values first."
    )
    layout = page_layout(bangkok, 1, quote)
    assert all(box.x0 > 0.5 for box in layout.highlights)  # the right-hand column
    # The PDF maps the "fi" ligature glyph to "f": its box is covered all the same.
    assert _spaceless("".join(_inside(bangkok, layout))) == _spaceless(quote).replace("fi", "f")

    time_bomb = _real("time-bomb.pdf")
    layout = page_layout(time_bomb, 2, "London, 1890. Big Ben sits proudly atop Elizabeth Tower")
    with pdfplumber.open(time_bomb) as pdf:
        cap = next(c for c in pdf.pages[1].chars if c["text"] == "L" and c["size"] > 20)
    first = layout.highlights[0]
    assert first.x0 * layout.width <= cap["x0"]  # the drop capital is in the first box…
    # …which does not reach down over the next line, as the capital does.
    assert _inside(time_bomb, layout) == [
        "ondon, 1890. Big Ben sits proudly atop",
        "Elizabeth Tower",
    ]


# --- sections as HTML ----------------------------------------------------------------------


def _section(tmp_path: Path, markdown: str) -> Section:
    path = tmp_path / "book.md"
    path.write_text(markdown, encoding="utf-8")
    game = GameInfo("book", "Book", (), "en", "", path, builtin=False)
    chunks = chunk_document(load_document(path, "book"), game)
    return table_of_contents(chunks)[0]


def test_a_section_is_escaped_html_with_its_lists_and_the_quote_marked(tmp_path: Path) -> None:
    section = _section(
        tmp_path,
        "# Book\n\n## Turn & order\n\nOn your turn, draw a card & play it. Then discard.\n\n"
        '- Move one space.\n- Attack if 2 < 3 and 4 > 1, a "neighbour".\n',
    )
    page = section_html(section, "Book", "Then discard.")
    assert '<mark id="rk-quote">Then discard.</mark>' in page
    assert page.count("<mark") == 1
    assert "<ul><li>Move one space.</li><li>Attack if 2 &lt; 3 and 4 &gt; 1, a &quot;" in page
    assert "draw a card &amp; play it." in page and "<h1>Turn &amp; order</h1>" in page
    with pytest.raises(QuoteNotFoundError, match="not in section 1"):
        section_html(section, "Book", "Roll two dice.")
    assert "<mark" not in section_html(section, "Book")


def test_a_quote_over_two_list_items_is_marked_in_both_with_one_anchor(tmp_path: Path) -> None:
    section = _section(tmp_path, "# Book\n\n## Moves\n\n- Move one space\n- Then attack\n")
    page = section_html(section, "Book", "Move one space - Then attack")
    assert '<li><mark id="rk-quote">Move one space</mark></li><li><mark>Then attack</mark>' in page


def test_a_chinese_section_keeps_its_characters(tmp_path: Path) -> None:
    section = _section(tmp_path, "# 规则\n\n## 回合\n\n每回合摸一张牌。然后弃一张牌。\n")
    page = section_html(section, "规则", "然后弃一张牌。")
    assert '<html lang="zh">' in page
    assert '每回合摸一张牌。<mark id="rk-quote">然后弃一张牌。</mark>' in page


# --- the cache and what is kept in it -------------------------------------------------------


def test_the_cache_keeps_what_was_used_last_and_removes_the_oldest(tmp_path: Path) -> None:
    cache = FileCache(tmp_path / "cache", max_bytes=1000)
    a = cache.put("a.png", b"a" * 400)
    b = cache.put("b.png", b"b" * 400)
    os.utime(a, (1000, 1000))
    os.utime(b, (2000, 2000))
    assert cache.get("a.png") == a  # used again: now the newest
    cache.put("c.png", b"c" * 400)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["a.png", "c.png"]
    assert cache.get("b.png") is None
    big = cache.put("big.png", b"x" * 5000)  # past the limit alone: kept, the others go
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["big.png"]
    assert big.read_bytes() == b"x" * 5000


def test_a_page_image_is_drawn_once_then_served_from_the_cache(
    book: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[tuple[int, int]] = []  # (page, boxes)
    real = views_module.render_page

    def counting(path: Path, page: int, width: int, boxes: Sequence[Box] = ()) -> bytes:
        drawn.append((page, len(boxes)))
        return real(path, page, width, boxes)

    monkeypatch.setattr(views_module, "render_page", counting)
    views = Views(settings)
    first = views.page_image(book, 1, WRAPPING, 400)
    again = views.page_image(book, 1, WRAPPING, 400)
    assert first == again and first.parent == settings.home / "cache" / "pages"
    assert drawn == [(1, 3)]  # three lines tinted
    other = views.page_image(book, 1, None, 400)
    assert other != first and drawn == [(1, 3), (1, 0)]
    assert views.image_tag(book, 1, WRAPPING, 400) != views.image_tag(book, 1, WRAPPING, 500)
    layout = views.page_layout(book, 1, WRAPPING)
    assert views.page_layout(book, 1, WRAPPING) == layout == page_layout(book, 1, WRAPPING)


def test_a_quote_opens_on_its_page_or_else_in_its_section(
    book: Path, settings: Settings, tmp_path: Path
) -> None:
    game = GameInfo("race", "Race", (), "en", "", book, builtin=False)
    chunks = chunk_document(load_document(book, "race"), game)
    views = Views(settings)

    def quote(text: str, page: int) -> Quote:
        chunk = next(c for c in chunks if text in c.text and c.page == page)
        return Quote(1, chunk.id, "race", chunk.section_path, page, text)

    image = views.quote_file(game, chunks, quote(WRAPPING, 1))
    assert image.suffix == ".png" and image.read_bytes().startswith(b"\x89PNG")
    sentence = next(
        chunk.text[s:e]
        for chunk in chunks
        for s, e in sentence_spans(chunk.text)
        if chunk.page == 2
    )
    moved = Quote(1, quote(sentence, 2).chunk_id, "race", "", 1, sentence)  # not on page 1
    html = views.quote_file(game, chunks, moved)
    assert html.suffix == ".html" and 'id="rk-quote"' in html.read_text(encoding="utf-8")
    with pytest.raises(QuoteNotFoundError):
        views.quote_file(game, chunks, Quote(1, "race:none", "race", "", None, sentence))


# --- the command line: `rules show --page`, `rules ask --open` -------------------------------


@pytest.fixture
def invoke(pipeline: Pipeline, book: Path) -> Callable[..., Result]:
    """`rules ...` over the fake pipeline, with the two-page PDF added as "Cube Race"."""
    pipeline.add_book(book, "Cube Race")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args), obj=CliState(lambda: pipeline))


def test_show_page_writes_the_image_and_prints_its_path(
    invoke: Callable[..., Result], settings: Settings, tmp_path: Path
) -> None:
    out = tmp_path / "page.png"
    result = invoke("show", "cube-race", "--page", "1", "--quote", WRAPPING, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out)
    assert Image.open(out).width == settings.showing.width
    cached = invoke("show", "cube-race", "--page", "2")
    path = Path(cached.stdout.strip())
    assert path.parent == settings.home / "cache" / "pages" and path.suffix == ".png"
    assert path.read_bytes().startswith(b"\x89PNG")


def test_show_page_explains_what_it_cannot_show(invoke: Callable[..., Result]) -> None:
    past = invoke("show", "cube-race", "--page", "3")
    assert past.exit_code == 1 and "the book has 2 pages" in past.stderr
    text = invoke("show", "suros", "--page", "1")
    assert text.exit_code == 1
    assert "rules show suros SECTION" in text.stderr and "/sections/SECTION/view" in text.stderr
    absent = invoke("show", "cube-race", "--page", "2", "--quote", WRAPPING)
    assert absent.exit_code == 1 and "not on page 2" in absent.stderr
    assert invoke("show", "cube-race", "--quote", WRAPPING).exit_code == 2  # no --page
    assert invoke("show", "cube-race", "1", "--page", "1").exit_code == 2


def _opened(result: Result) -> Path:
    """The file `ask --open` named on stderr."""
    assert result.exit_code == 0, result.output
    found = re.search(r"(/\S+\.(?:png|html))\s*$", result.stderr)
    assert found, result.stderr
    return Path(found[1])


def test_ask_open_prints_the_path_where_no_viewer_can_open(
    invoke: Callable[..., Result], settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(webbrowser, "open", lambda url: pytest.fail(f"opened {url}"))
    result = invoke("ask", "how many red cubes does each player take", "--game", "cube-race",
                    "--json", "--open")  # fmt: skip
    deciding = next(q for q in json.loads(result.stdout)["quotes"] if q["deciding"])
    image = _opened(result)
    assert "no viewer" in result.stderr
    book = settings.user_books_dir / "cube-race" / "rulebook.pdf"
    width = settings.showing.width
    tag = Views(settings).image_tag(book, deciding["page"], deciding["text"], width)
    assert image == settings.home / "cache" / "pages" / f"{tag}.png" and image.exists()


def test_ask_open_opens_a_section_at_its_marked_sentence(
    invoke: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISPLAY", ":0")
    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)
    result = invoke("ask", "what HP does each player start with", "--game", "suros", "--open")
    page = _opened(result)
    assert page.suffix == ".html" and opened == [f"{page.as_uri()}#rk-quote"]
    assert '<mark id="rk-quote">' in page.read_text(encoding="utf-8")
