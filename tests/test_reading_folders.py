"""Reading reStructuredText, folders of mixed pages, Markdown escapes and entities, and
Chinese lines joined as written."""

from pathlib import Path

import pytest

from rag.errors import IngestError
from rag.reading.chunking import chunk_document
from rag.reading.files import SUPPORTED_SUFFIXES, load_document, markdown_folder
from rag.types import GameInfo


def _lines(tmp_path: Path, name: str, text: str) -> list[str]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load_document(path, "g").text.split("\n")


def _rst(tmp_path: Path, text: str) -> list[str]:
    return _lines(tmp_path, "book.rst", text)


# ---------------------------------------------------------------- reStructuredText


def test_rst_heading_levels_follow_the_order_adornments_first_appear(tmp_path: Path) -> None:
    assert _rst(
        tmp_path,
        "==========\nSpace Race\n==========\n\nSetup\n-----\n\nDeal five cards.\n\n"
        "Board\n~~~~~\n\nPlace it.\n\nTurn\n----\n\nDraw.\n",
    ) == [
        "# Space Race",
        "## Setup",
        "Deal five cards.",
        "### Board",
        "Place it.",
        "## Turn",
        "Draw.",
    ]
    # The style seen first is the top level, whatever its character; an overline makes
    # another style than the same underline alone.
    assert _rst(
        tmp_path, "Setup\n*****\n\nDeal.\n\n=====\nCards\n=====\n\nRoll\n****\n\nRoll one.\n"
    ) == ["# Setup", "Deal.", "## Cards", "# Roll", "Roll one."]


def test_rst_chinese_titles_with_underlines_of_any_length(tmp_path: Path) -> None:
    # Chinese characters are two columns wide: underlines are often too short or too long.
    lines = _rst(
        tmp_path,
        "游戏规则\n====\n\n游戏准备\n---\n\n将地图板放在桌子中央。\n\n"
        "1. 回合流程\n------------------------\n\n每回合抽一张牌。\n",
    )
    assert lines == [
        "# 游戏规则",
        "## 游戏准备",
        "将地图板放在桌子中央。",
        "## 1. 回合流程",
        "每回合抽一张牌。",
    ]


def test_rst_directives_drop_pictures_and_notes_keep_their_text(tmp_path: Path) -> None:
    lines = _rst(
        tmp_path,
        ".. role:: strike\n    :class: strike\n\n"
        ".. _setup:\n\n"
        "Setup\n=====\n\n"
        ".. image:: board.png\n   :width: 200\n\n"
        ".. figure:: cards.png\n   :align: center\n\n   The cards\n\n"
        ".. toctree::\n   :maxdepth: 2\n\n   setup\n   turn\n\n"
        ".. This is a comment\n   over two lines.\n\n"
        "..\n   An empty comment's block.\n\n"
        ".. note:: Shuffle the deck\n   before each game.\n\n"
        ".. warning::\n   :class: big\n\n   Never deal to yourself.\n\n"
        ".. sidebar:: Quick reference\n\n   | Draw one card.\n   | Play one card.\n\n"
        ".. topic:: Winning\n\n   The first empty hand wins.\n\n"
        ".. rubric:: Variants\n\n"
        ".. admonition:: Solo play\n\n   Play both hands.\n\n"
        "Deal five cards [#]_.\n\n"
        ".. [#] Six with two players.\n"
        ".. [1] A numbered footnote.\n"
        ".. |dice| image:: dice.png\n",
    )
    assert lines == [
        "# Setup",
        "Shuffle the deck before each game.",
        "Never deal to yourself.",
        "Quick reference",
        "Draw one card.",
        "Play one card.",
        "Winning",
        "The first empty hand wins.",
        "Variants",
        "Solo play",
        "Play both hands.",
        "Deal five cards.",
    ]


def test_rst_inline_markup_references_and_escapes(tmp_path: Path) -> None:
    lines = _rst(
        tmp_path,
        "Roll **two** *dice* and ``add`` them: see `the site <https://example.com>`_,\n"
        ":ref:`Scoring <scoring>`, `Setup`_, setup_, `interpreted`, :strike:`old`\n"
        "and |dice|\\ s [1]_. Five\\*s \\*count\\* double.\n\n"
        "决斗\\ [#]_\\ 的规则\\ :strong:`不能`\\ 发动，``a\\b``。\n",
    )
    assert lines == [
        "Roll two dice and add them: see the site, Scoring, Setup, setup, interpreted, old "
        "and dices. Five*s *count* double.",
        "决斗的规则不能发动，a\\b。",
    ]


def test_rst_lists_line_blocks_and_literal_blocks(tmp_path: Path) -> None:
    lines = _rst(
        tmp_path,
        "Turn:\n\n- Draw a card\n  from the deck.\n- | Play a card.\n  | Example:\n"
        "  | Play a dragon.\n\n  - A nested item.\n\n"
        "1. First step.\n2. Second step.\n\n#. Auto step.\n\n"
        "| Line one\n|    Line two\n  goes on.\n\n"
        "Example::\n\n    roll(2)\n    add()\n",
    )
    assert lines == [
        "Turn:",
        "- Draw a card from the deck.",
        "- Play a card.",
        "Example:",
        "Play a dragon.",
        "- A nested item.",
        "1. First step.",
        "2. Second step.",
        "- Auto step.",
        "Line one",
        "Line two goes on.",
        "Example:",
        "roll(2)",
        "add()",
    ]


def test_rst_grid_and_simple_tables_read_row_by_row(tmp_path: Path) -> None:
    lines = _rst(
        tmp_path,
        "+--------+--------+\n| Player | Cards  |\n| count  |        |\n+========+========+\n"
        "| 2      | **7**  |\n+--------+--------+\n| 3-4    | 5      |\n+--------+--------+\n\n"
        "=====  ========  ======\n\\      Summoned to\n-----  ----------------\n"
        "Card   EX zone   Main\n=====  ========  ======\n融合      ○         ×\n"
        "S       ○\n       goes on\n=====  ========  ======\n",
    )
    assert lines == [
        "Player count | Cards",
        "2 | 7",
        "3-4 | 5",
        "Summoned to",  # the empty corner cell left out, the header spanning two columns
        "Card | EX zone | Main",
        "融合 | ○ | ×",  # wide characters measured two columns wide
        "S | ○ goes on",
    ]


def test_rst_list_and_csv_tables(tmp_path: Path) -> None:
    lines = _rst(
        tmp_path,
        ".. list-table:: Hand sizes\n   :header-rows: 1\n\n"
        "   * - Players\n     - Cards\n   * - 2\n     - 7\n\n"
        '.. csv-table:: Scores\n   :header: "Card", "Points"\n\n   "Ace, high", 11\n   King, 4\n',
    )
    assert lines == [
        "Hand sizes",
        "Players | Cards",
        "2 | 7",
        "Scores",
        "Card | Points",
        "Ace, high | 11",
        "King | 4",
    ]


def test_rst_file_is_supported_and_marks_its_headings(tmp_path: Path) -> None:
    assert ".rst" in SUPPORTED_SUFFIXES
    path = tmp_path / "book.rst"
    path.write_text("Setup\n=====\n\nDeal five cards.\n", encoding="utf-8")
    assert load_document(path, "g").headings_marked


# ---------------------------------------------------------------- folders


def _mixed(folder: Path) -> Path:
    """A folder of pages of every kind, named out of order, with a site's own folders."""
    folder.mkdir()
    (folder / "10-scoring.html").write_text(
        "<html><head><title>Site</title></head><body><nav>Home</nav><h1>Scoring</h1>"
        "<p>Each card scores &amp; counts.</p><h2>Ties</h2><p>Share it.</p></body></html>",
        encoding="utf-8",
    )
    (folder / "2-setup.rst").write_text(
        "=====\nSetup\n=====\n\nDeal five cards.\n\nBoard\n=====\n\nPlace it.\n", encoding="utf-8"
    )
    (folder / "1-intro.md").write_text("Pebble Race is a game.\n", encoding="utf-8")
    (folder / "3-turn.txt").write_text(
        "# of cards: draw one.\n- - -\n> not a quote\n+ 2 points\n| not | a table |\n"
        "&lt;b&gt; *not* _markup_ ~~kept~~ [a](b) \\ 1. Item\n",
        encoding="utf-8",
    )
    (folder / "9-end.txt").write_text("The game ends.\n", encoding="utf-8")
    (folder / "_build").mkdir()
    (folder / "_build" / "setup.html").write_text("<h1>Setup</h1><p>Again.</p>", "utf-8")
    (folder / ".hidden.md").write_text("# Hidden\n", encoding="utf-8")
    (folder / "cover.png").write_bytes(b"\x89PNG")
    return folder


def test_folder_of_mixed_pages_reads_each_as_a_section_in_name_order(tmp_path: Path) -> None:
    folder = _mixed(tmp_path / "book")
    doc = load_document(folder, "space-race")
    assert doc.headings_marked
    assert doc.text.split("\n") == [
        "# Intro",
        "Pebble Race is a game.",
        "# Setup",
        "Deal five cards.",
        "## Board",
        "Place it.",
        "# Turn",  # a text page: its lines as they are, never headings
        "# of cards: draw one.",
        "- - -",
        "> not a quote",
        "+ 2 points",
        "| not | a table |",
        "<b> *not* _markup_ ~~kept~~ [a](b) \\ 1. Item",
        "# End",
        "The game ends.",
        "# Scoring",
        "Each card scores & counts.",
        "## Ties",
        "Share it.",
    ]
    game = GameInfo("space-race", "Space Race", (), "en", "test", folder)
    sections = [c.section for c in chunk_document(doc, game)]
    assert ("Space Race", "Setup", "Board") in sections
    assert ("Space Race", "Scoring", "Ties") in sections


def test_folder_kept_as_markdown_reads_back_the_same(tmp_path: Path) -> None:
    """`rules add` keeps a folder as one Markdown file; read again, it is the same book."""
    folder = _mixed(tmp_path / "book")
    kept = tmp_path / "rulebook.md"
    kept.write_text(markdown_folder(folder), encoding="utf-8")
    text = load_document(kept, "g").text
    assert text == load_document(folder, "g").text
    assert "| not | a table |" in text.split("\n")


def test_folder_page_reads_as_the_file_alone(tmp_path: Path) -> None:
    page = (
        "Setup\n=====\n\nA *wide* table::\n\n    kept\n\n"
        "+---+---+\n| a | b |\n+---+---+\n\n- [x] ``<i>`` & more_\n"
    )
    alone = _rst(tmp_path, page)
    (tmp_path / "wiki").mkdir()
    (tmp_path / "wiki" / "page.rst").write_text(page, encoding="utf-8")
    assert load_document(tmp_path / "wiki", "g").text.split("\n") == alone


def test_a_text_page_in_a_folder_has_its_chinese_numbered_headings(tmp_path: Path) -> None:
    folder = tmp_path / "wiki"
    folder.mkdir()
    (folder / "1-rules.txt").write_text(
        "第一章 基本规则\n一、总则\n四人对局。\n（一）摸牌\n摸一张牌。\n"
        "二、计分\n一、和牌后计番。\n",
        encoding="utf-8",
    )
    assert load_document(folder, "g").text.split("\n") == [
        "# Rules",
        "## 第一章 基本规则",
        "### 一、总则",
        "四人对局。",
        "#### （一）摸牌",
        "摸一张牌。",
        "### 二、计分",
        "一、和牌后计番。",  # a sentence, not a heading
    ]


def test_folder_without_pages_names_every_kind_it_reads(tmp_path: Path) -> None:
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "a.png").write_bytes(b"\x89PNG")
    with pytest.raises(IngestError) as info:
        load_document(tmp_path / "pics", "g")
    assert all(s in str(info.value) for s in (".md", ".markdown", ".rst", ".txt", ".html", ".htm"))


# ---------------------------------------------------------------- Markdown, text, Chinese


def test_markdown_escapes_and_entities_are_resolved(tmp_path: Path) -> None:
    lines = _lines(
        tmp_path,
        "book.md",
        "# C# \\#1\n\nRoll 1\\~3 dice \\*twice\\* \\_here\\_ \\<b\\> \\[x\\]\\(y\\)\\!\n"
        "&lt;b&gt; &amp; &nbsp;space&#160;and&#x4e2d;文&#12288;here, \\&amp; AT&T\n\n"
        "- 第一　条 `&amp; <i>`\n",
    )
    assert lines == [
        "# C# #1",
        "Roll 1~3 dice *twice* _here_ <b> [x](y)! <b> & space and中文 here, &amp; AT&T",
        "- 第一 条 &amp; <i>",  # an ideographic space is a space; code is as written
    ]


def test_text_entities_are_resolved(tmp_path: Path) -> None:
    assert _lines(tmp_path, "book.txt", "Salt &amp; pepper&nbsp;pots, Q&A\n") == [
        "Salt & pepper pots, Q&A"
    ]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("book.md", "游戏准备\n\n将地图板放在\n桌子中央，然后\n「抽牌」。每人\n5 张 EX\n卡组。\n"),
        (
            "book.rst",
            "游戏准备\n========\n\n将地图板放在\n桌子中央，然后\n「抽牌」。每人\n5 张 EX\n卡组。\n",
        ),
        (
            "book.html",
            "<h1>游戏准备</h1><p>将地图板放在\n  桌子中央，然后\n「抽牌」。"
            "每人\n5 张 EX\n卡组。</p>",
        ),
    ],
    ids=["markdown", "rst", "html"],
)
def test_chinese_lines_join_without_spaces(tmp_path: Path, name: str, text: str) -> None:
    # Between Chinese characters a line break is no space; next to Latin text it is one.
    assert (
        _lines(tmp_path, name, text)[-1]
        == "将地图板放在桌子中央，然后「抽牌」。每人 5 张 EX 卡组。"
    )
