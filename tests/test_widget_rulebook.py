"""The widget's rulebook viewer in headless Chromium: a quote opens its page with the sentence
highlighted (PDFs) or its section with the sentence marked (other books), the Rulebook tab
browses the contents, and a view that cannot be had falls back to the passage as text; at a
phone's width and a desktop's. Screenshots are left in the test's tmp_path."""

from __future__ import annotations

import base64
import io
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from conftest import CHROMIUM, FakeEmbedder, on_fake_scale
from test_api_widget import ask, open_demo
from test_pdf import REAL_RULEBOOKS

from rag.generation import ExtractiveGenerator
from rag.pipeline import Pipeline
from rag.settings import BUILTIN_CORPUS, Settings

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install chromium)",
    ),
]

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}

# Real PDFs, each with a question whose deciding sentence wraps lines: in Bangkok, in the
# second of two columns, starting mid-line.
PDFS = {
    "time-bomb": ("time-bomb.pdf", "Time Bomb", "How many Wire cards are dealt to each player?"),
    "bangkok": (
        "bangkok.pdf",
        "Bangkok",
        "If there are no empty places below, where do I place the duplicate die?",
    ),
}

# A Markdown book whose deciding sentence lies far down a long section: it must be scrolled to.
FILLER = "\n\n".join(
    f"Lighthouse keepers log beacon number {i} at dusk and again at dawn." for i in range(40)
)
HARBOUR = f"""# Harbour Lights

## Setup

Each captain takes one ship, three cargo crates and a harbour card.

## Sailing

On your turn, sail your ship up to three sea spaces.

## Weather

{FILLER}

A ship caught in a storm loses one cargo crate of its captain's choice.

## Winning

The first captain to deliver six crates wins.
"""
STORM = "Which cargo crate does a ship caught in a storm lose?"
STORM_RULE = "A ship caught in a storm loses one cargo crate of its captain's choice."

ZH_BOOK = """# 竹林棋

## 准备

每位玩家拿取十二枚棋子，放在自己一侧的底线上。

## 行动

轮到你时，把你的一枚棋子沿直线移动到相邻的空格。

## 吃子

被对手棋子从两侧夹住的棋子立即从棋盘上移除。

## 胜利

先吃掉对手八枚棋子的玩家获胜。
"""
ZH_QUESTION = "被夹住的棋子会怎样？"


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def books(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pipeline, dict[str, str]]]:
    """The fake-model pipeline with the books added once for the module (reading a PDF takes
    seconds), and the slugs they were added under."""
    home = tmp_path_factory.mktemp("home")
    folder = tmp_path_factory.mktemp("books")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RULEKEEPER_HOME", str(home))
        env.delenv("RULEKEEPER_CONFIG", raising=False)
        settings = on_fake_scale(Settings(home=home, corpus_dir=BUILTIN_CORPUS))
        pipeline = Pipeline(settings, embedder=FakeEmbedder(), generator=ExtractiveGenerator())
        slugs = {
            "harbour": pipeline.add_book(
                _write(folder / "harbour.md", HARBOUR), "Harbour Lights"
            ).game.slug,
            "zh": pipeline.add_book(
                _write(folder / "zhulin.md", ZH_BOOK), "竹林棋", ["Zhulin"]
            ).game.slug,
        }
        for key, (name, title, _) in PDFS.items():
            if (REAL_RULEBOOKS / name).exists():
                slugs[key] = pipeline.add_book(REAL_RULEBOOKS / name, title).game.slug
        yield pipeline, slugs


Served = tuple[str, dict[str, str]]


@pytest.fixture
def served(serve_api: Any, books: tuple[Pipeline, dict[str, str]]) -> Served:
    """The app over the module's books: its URL, and the books' slugs."""
    pipeline, slugs = books
    return serve_api(pipeline), slugs


def _pdf(slugs: dict[str, str], key: str) -> tuple[Path, str, str]:
    if key not in slugs:
        pytest.skip(f"{PDFS[key][0]} is not in {REAL_RULEBOOKS} (RULEKEEPER_REAL_RULEBOOKS)")
    return REAL_RULEBOOKS / PDFS[key][0], slugs[key], PDFS[key][2]


def _deciding(url: str, question: str, game: str) -> dict[str, Any]:
    """The deciding quote of the answer the widget gets (the fakes answer alike every time)."""
    answer = httpx.post(f"{url}/v1/ask", json={"question": question, "game": game}).json()
    return next(q for q in answer["quotes"] if q["deciding"])


def _asked(page: Any, url: str, question: str, game: str, size: dict[str, int]) -> None:
    page.set_viewport_size(size)
    open_demo(page, url)
    page.wait_for_selector(f".rk-game option[value='{game}']", state="attached")
    ask(page, question, game)
    page.wait_for_selector(".rk-cite")


def _in_sight(page: Any, box: dict[str, float]) -> None:
    """The box is on screen and in the viewer's scrolled view: seen without scrolling."""
    view = page.locator(".rk-view-body").bounding_box()
    size = page.viewport_size
    assert box["x"] >= 0 and box["x"] + box["width"] <= size["width"]
    assert box["y"] >= 0 and box["y"] + box["height"] <= size["height"]
    assert view["y"] <= box["y"] and box["y"] + box["height"] <= view["y"] + view["height"]


def _fits(page: Any) -> None:
    """Nothing wider than the window: no sideways scrolling, on a phone either."""
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")


def _letters(text: str) -> str:
    return re.sub(r"\W", "", text).casefold()


def _page_highlight(page: Any, url: str, quote: dict[str, Any], pdf: Path) -> None:
    """The page image shows the quoted sentence highlighted, in sight, and nothing else."""
    from PIL import Image

    pdfplumber = pytest.importorskip("pdfplumber")
    game, number = quote["game"], quote["page"]
    layout = httpx.get(
        f"{url}/v1/games/{game}/pages/{number}", params={"quote": quote["text"]}
    ).json()
    lines = layout["highlights"]
    assert lines
    # The boxes are over the sentence's words and no other's.
    with pdfplumber.open(pdf) as document:
        sheet = document.pages[number - 1]
        w, h = float(sheet.width), float(sheet.height)
        under = [
            sheet.within_bbox(
                (b["x0"] * w - 0.5, b["top"] * h - 0.5, b["x1"] * w + 0.5, b["bottom"] * h + 0.5)
            ).extract_text()
            for b in lines
        ]
    assert _letters(" ".join(under)) == _letters(quote["text"])
    # The widget outlines them where the image shows them, all in sight.
    canvas = page.locator(".rk-page canvas").bounding_box()
    shown = [box.bounding_box() for box in page.locator(".rk-hl").all()]
    assert len(shown) == len(lines)
    for box, line in zip(shown, lines, strict=True):
        assert box["x"] == pytest.approx(canvas["x"] + line["x0"] * canvas["width"], abs=1)
        assert box["y"] == pytest.approx(canvas["y"] + line["top"] * canvas["height"], abs=1)
        right = canvas["x"] + line["x1"] * canvas["width"]
        assert box["x"] + box["width"] == pytest.approx(right, abs=1)
        _in_sight(page, box)
    # The image drawn is the page with those boxes tinted, and only them: against the same
    # page drawn without a quote, every changed pixel is in a box, and the boxes changed. (The
    # tint moves a white pixel by about 96 in blue; the PNG's 256-colour palette, made anew
    # with the tint in it, may move other pixels a little.)
    data = page.eval_on_selector(".rk-page canvas", "c => c.toDataURL('image/png')")
    drawn = np.asarray(Image.open(io.BytesIO(base64.b64decode(data.split(",")[1]))).convert("RGB"))
    height, width = drawn.shape[:2]
    assert canvas["width"] <= page.eval_on_selector(".rk-view-body", "b => b.clientWidth")
    plain_png = httpx.get(f"{url}/v1/games/{game}/pages/{number}.png", params={"width": width})
    plain = np.asarray(Image.open(io.BytesIO(plain_png.content)).convert("RGB"))
    assert plain.shape == drawn.shape
    changed = np.abs(drawn.astype(int) - plain.astype(int)).max(axis=2) > 48
    inside = np.zeros_like(changed)
    for line in lines:
        rows = slice(math.floor(line["top"] * height) - 2, math.ceil(line["bottom"] * height) + 2)
        cols = slice(math.floor(line["x0"] * width) - 2, math.ceil(line["x1"] * width) + 2)
        inside[rows, cols] = True
        core = (
            slice(math.ceil(line["top"] * height) + 1, math.floor(line["bottom"] * height) - 1),
            slice(math.ceil(line["x0"] * width) + 1, math.floor(line["x1"] * width) - 1),
        )
        assert changed[core].mean() > 0.9
    assert not (changed & ~inside).any()


@pytest.mark.parametrize("key", list(PDFS))
def test_a_pdf_quote_opens_its_page_with_the_sentence_highlighted(
    key: str, page: Any, served: Served, tmp_path: Path
) -> None:
    url, slugs = served
    pdf, game, question = _pdf(slugs, key)
    quote = _deciding(url, question, game)
    assert quote["page"]
    _asked(page, url, question, game, PHONE)
    for size in (PHONE, DESKTOP):
        page.set_viewport_size(size)
        page.click(".rk-answer mark.rk-deciding")
        page.wait_for_selector(".rk-page canvas")
        assert page.inner_text(".rk-page-label").startswith(f"Page {quote['page']} of ")
        _page_highlight(page, url, quote, pdf)
        _fits(page)
        page.screenshot(path=tmp_path / f"{key}-{size['width']}.png")
        page.click(".rk-back")
        assert page.locator(".rk-answer").is_visible()


def test_a_markdown_quote_opens_its_section_scrolled_to_the_sentence(
    page: Any, served: Served, tmp_path: Path
) -> None:
    url, slugs = served
    game = slugs["harbour"]
    assert _deciding(url, STORM, game)["text"] == STORM_RULE
    _asked(page, url, STORM, game, PHONE)
    page.evaluate("document.body.style.paddingBottom = '150vh'")  # a long host page
    for size in (PHONE, DESKTOP):
        page.set_viewport_size(size)
        page.locator(".rk-answer mark.rk-deciding").scroll_into_view_if_needed()
        page.evaluate("scrollBy(0, 40)")
        before = page.evaluate("scrollY")
        page.click(".rk-answer mark.rk-deciding")
        mark = page.frame_locator(".rk-frame").locator("mark#rk-quote")
        assert mark.inner_text() == STORM_RULE
        page.wait_for_selector(".rk-frame:not([hidden])")
        # Far down its section, yet in sight: the panel was scrolled to it.
        assert page.eval_on_selector(".rk-view-body", "b => b.scrollTop") > 0
        _in_sight(page, mark.bounding_box())
        _fits(page)
        page.screenshot(path=tmp_path / f"harbour-{size['width']}.png")
        # Back to the chat, where the reader was.
        page.click(".rk-back")
        assert page.evaluate("scrollY") == before
        assert page.locator(".rk-answer mark.rk-deciding").is_visible()


def test_every_quoted_sentence_and_citation_opens_the_rulebook(page: Any, served: Served) -> None:
    url, slugs = served
    game = slugs["harbour"]
    _asked(page, url, STORM, game, DESKTOP)
    answer = httpx.post(f"{url}/v1/ask", json={"question": STORM, "game": game}).json()
    others = [q for q in answer["quotes"] if not q["deciding"]]
    links = page.locator(".rk-answer .rk-quote-link")
    assert links.count() == len(others) > 0
    link = links.first
    text = link.inner_text().strip("“”")
    link.focus()
    page.keyboard.press("Enter")  # by keyboard too
    mark = page.frame_locator(".rk-frame").locator("mark#rk-quote")
    assert mark.inner_text() == text == others[0]["text"]
    page.click(".rk-back")
    page.locator(".rk-cite").first.click()  # a citation: its deciding sentence
    assert mark.inner_text() == STORM_RULE


def test_the_rulebook_tab_lists_the_contents_and_opens_sections(
    page: Any, served: Served, tmp_path: Path
) -> None:
    url, slugs = served
    game = slugs["harbour"]
    contents = httpx.get(f"{url}/v1/games/{game}/contents").json()
    page.set_viewport_size(PHONE)
    open_demo(page, url)
    page.click(".rk-tab-book")  # no game chosen yet: a picker
    assert page.locator(".rk-chat").is_hidden()
    page.select_option(".rk-book-game", game)
    page.wait_for_selector(".rk-toc-section")
    assert page.locator(".rk-toc-section").all_inner_texts() == [
        f"{s['number']}. {s['title']}" for s in contents["sections"]
    ]
    assert page.locator(".rk-toc-page").count() == 0  # a book without pages
    _fits(page)
    page.screenshot(path=tmp_path / "contents-390.png")
    page.locator(".rk-toc-section", has_text="Winning").click()
    frame = page.frame_locator(".rk-frame")
    assert frame.locator("h1").inner_text() == "Winning"
    assert "six crates" in frame.locator("body").inner_text()
    assert page.locator(".rk-pager").is_hidden()
    page.click(".rk-to-contents")
    page.wait_for_selector(".rk-toc-section")
    page.click(".rk-tab-chat")
    page.click(".rk-tab-book")  # comes back as it was left
    assert page.locator(".rk-toc-section").count() == len(contents["sections"])


def test_the_rulebook_tab_opens_pdf_pages(page: Any, served: Served, tmp_path: Path) -> None:
    url, slugs = served
    _, game, _ = _pdf(slugs, "time-bomb")
    contents = httpx.get(f"{url}/v1/games/{game}/contents").json()
    last = contents["pages"]
    page.set_viewport_size(DESKTOP)
    open_demo(page, url)
    page.select_option(".rk-game", game)  # the chat's game is the rulebook's
    page.click(".rk-tab-book")
    page.wait_for_selector(".rk-toc-page")
    pages = [p for s in contents["sections"] for p in s["pages"]]
    assert page.locator(".rk-toc-page").all_inner_texts() == [f"p. {p}" for p in pages]
    page.locator(".rk-toc-page").last.click()
    page.wait_for_selector(".rk-page canvas")
    assert page.inner_text(".rk-page-label") == f"Page {last} of {last}"
    assert page.locator(".rk-hl").count() == 0  # no quote, no highlight
    assert page.locator(".rk-next").is_disabled()
    canvas = page.locator(".rk-page canvas").bounding_box()
    body = page.locator(".rk-view-body")
    assert canvas["width"] <= body.evaluate("b => b.clientWidth")  # scaled to the panel
    page.screenshot(path=tmp_path / "time-bomb-page-1280.png")
    page.click(".rk-previous")
    page.wait_for_function(
        "t => document.querySelector('.rk-page-label').textContent === t",
        arg=f"Page {last - 1} of {last}",
    )
    page.wait_for_selector(".rk-page canvas")
    page.click(".rk-to-contents")
    page.locator(".rk-toc-section", has_text="Setup").click()
    assert page.frame_locator(".rk-frame").locator("h1").inner_text() == "Setup"


def test_a_chinese_book_in_chinese(page: Any, served: Served, tmp_path: Path) -> None:
    url, slugs = served
    game = slugs["zh"]
    quote = _deciding(url, ZH_QUESTION, game)
    assert "夹住" in quote["text"]

    def in_chinese(route: Any) -> None:  # an owner's page asking for Chinese labels
        html = route.fetch().text()
        route.fulfill(
            body=html.replace("<div data-rulekeeper>", '<div data-rulekeeper data-lang="zh">')
        )

    page.route(f"{url}/demo", in_chinese)
    for size in (PHONE, DESKTOP):
        _asked(page, url, ZH_QUESTION, game, size)
        assert page.locator(".rk-tab").all_inner_texts() == ["对话", "规则书"]
        page.click(".rk-answer mark.rk-deciding")
        mark = page.frame_locator(".rk-frame").locator("mark#rk-quote")
        assert mark.inner_text() == quote["text"]
        page.wait_for_selector(".rk-frame:not([hidden])")
        _in_sight(page, mark.bounding_box())
        assert page.inner_text(".rk-back") == "← 返回对话"
        _fits(page)
        page.screenshot(path=tmp_path / f"zh-{size['width']}.png")
        page.click(".rk-to-contents")
        page.wait_for_selector(".rk-toc-section")
        assert page.locator(".rk-toc-section").all_inner_texts() == [
            "1. 准备",
            "2. 行动",
            "3. 吃子",
            "4. 胜利",
        ]


@pytest.mark.parametrize("failure", ["422", "unreachable"])
def test_a_view_that_fails_shows_the_passage_as_text(
    failure: str, page: Any, served: Served
) -> None:
    url, slugs = served
    game = slugs["harbour"]

    def refuse(route: Any) -> None:
        if failure == "unreachable":
            route.abort("connectionrefused")
        else:
            error = {"error": {"type": "quote_not_found", "message": "Not in that section."}}
            route.fulfill(status=422, json=error)

    page.route("**/sections/*/view*", refuse)
    _asked(page, url, STORM, game, PHONE)
    page.click(".rk-answer mark.rk-deciding")
    page.wait_for_selector(".rk-passage-where")  # the section's own text, where it is
    assert page.inner_text(".rk-view-status") == (
        "The rulebook could not be shown here; this is its text."
    )
    assert page.inner_text(".rk-passage-quote") == STORM_RULE
    assert "Lighthouse keepers" in page.inner_text(".rk-passage-text")
    assert page.locator(".rk-frame").count() == 0
    page.click(".rk-back")
    assert page.locator(".rk-answer").is_visible()
