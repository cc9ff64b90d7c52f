"""What `add_book` reports about a rulebook it read, and the warnings when it reads wrongly."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FakeEmbedder

from rag.pipeline import Pipeline
from rag.reading.chunking import chunk_document
from rag.reading.files import load_document
from rag.reading.report import ingest_report, page_count
from rag.settings import Settings
from rag.types import GameInfo, IngestReport


def _report(path: Path, title: str = "Pebble Race") -> IngestReport:
    game = GameInfo("pebble-race", title, (), "en", "", path)
    document = load_document(path, game.slug)
    return ingest_report(document, chunk_document(document, game), page_count(path))


def _problems(report: IngestReport) -> list[str]:
    return [warning.problem for warning in report.warnings]


def test_the_counts_of_a_small_rulebook(settings: Settings, rulebook: Path) -> None:
    report = Pipeline(settings, embedder=FakeEmbedder()).add_book(rulebook, "Pebble Race").report

    # 8 + 18 + 8 words of rules and 5 of headings (the title's two included); a sentence in
    # the first and last sections, two in the second.
    assert report == IngestReport("pebble-race", None, 3, 4, 3, 39, 0, "en", ())


def test_a_chinese_rulebook_is_measured_in_characters(tmp_path: Path) -> None:
    path = tmp_path / "pebble.txt"
    path.write_text(
        "一、准备\n每位玩家拿五颗石子和一个杯子，然后坐好。\n二、胜利\n最先用完手中石子的玩家获胜。\n",
        encoding="utf-8",
    )
    report = _report(path)
    assert report.language == "zh"
    assert (report.sections, report.sentences, report.passages) == (2, 2, 2)
    # 一准备 3, 每位玩家拿五颗石子和一个杯子然后坐好 18, 二胜利 3, 最先用完手中石子的玩家获胜 13.
    assert report.characters == 37


@pytest.mark.parametrize(("codec", "encoding"), [("gbk", "GB18030"), ("utf-16-le", "UTF-16LE")])
def test_a_rulebook_not_in_utf8_is_reported_with_its_encoding(
    tmp_path: Path, codec: str, encoding: str
) -> None:
    path = tmp_path / "pebble.txt"
    path.write_bytes("准备\n每位玩家拿五颗石子和一个杯子。\n".encode(codec))
    report = _report(path)
    assert _problems(report) == ["encoding"]
    assert f"pebble.txt as {encoding}" in report.warnings[0].message


def test_the_built_in_rulebooks_raise_no_warning(settings: Settings) -> None:
    pipeline = Pipeline(settings, embedder=FakeEmbedder())
    for game in pipeline.corpus.games:
        document = load_document(game.path, game.slug)
        report = ingest_report(document, chunk_document(document, game), None)
        assert report.warnings == (), game.slug


def _write_pdf(path: Path, pages: int, text_pages: int) -> None:
    """A PDF whose first `text_pages` pages hold rules text (each line its own: a line on
    most pages is dropped as a running header) and the others only a drawing, as a scanned
    page's picture would."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen.canvas import Canvas

    canvas = Canvas(str(path), pagesize=A4)
    for page in range(1, pages + 1):
        if page <= text_pages:
            canvas.drawString(72, 760, f"Round {page}")
            for line in range(8):
                rule = f"In round {page}, each player draws {line + 1} cards."
                canvas.drawString(72, 730 - 16 * line, rule)
        else:
            canvas.rect(72, 72, 400, 600, fill=1)
        canvas.showPage()
    canvas.save()


def test_a_pdf_of_pictures_is_reported_as_scanned(settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "scanned.pdf"
    _write_pdf(path, pages=10, text_pages=1)

    report = Pipeline(settings, embedder=FakeEmbedder()).add_book(path, "Scanned").report

    assert report.pages == 10
    assert _problems(report) == ["little_text"]
    assert "Only 1 of its 10 pages have text" in report.warnings[0].message
    assert "OCR" in report.warnings[0].message


def test_a_pdf_with_text_on_most_pages_is_not_scanned(tmp_path: Path) -> None:
    path = tmp_path / "pictures.pdf"
    _write_pdf(path, pages=10, text_pages=6)
    report = _report(path)
    assert report.pages == 10
    assert "little_text" not in _problems(report)


def _sentences(count: int) -> list[str]:
    return [
        f"In round {n} every player moves the pawn forward by the number rolled."
        for n in range(count)
    ]


@pytest.mark.parametrize("headed", [False, True])
def test_one_section_holding_most_of_the_text(tmp_path: Path, headed: bool) -> None:
    path = tmp_path / "long.txt"
    paragraphs = [" ".join(_sentences(60)[i : i + 5]) for i in range(0, 60, 5)]  # ~720 words
    if headed:
        paragraphs = [f"Phase {chr(65 + i)}\n{p}" for i, p in enumerate(paragraphs)]
    path.write_text("\n".join(paragraphs), encoding="utf-8")

    report = _report(path)

    assert report.words > 500
    if headed:
        assert report.sections == 12
        assert report.warnings == ()
    else:
        assert _problems(report) == ["one_section"]
        assert "headings" in report.warnings[0].message


def test_a_short_rulebook_may_have_one_section(tmp_path: Path) -> None:
    path = tmp_path / "short.txt"
    path.write_text(" ".join(_sentences(20)), encoding="utf-8")  # ~240 words
    assert _report(path).warnings == ()


def test_text_of_mostly_symbols_is_reported_as_garbled(tmp_path: Path) -> None:
    path = tmp_path / "garbled.txt"
    garbled = "Setup\n" + "\n".join("¤¶ §± ×÷ 12 34 %% && @@ Ω ◊ " * 3 for _ in range(20))
    path.write_text(garbled + "\nShuffle the deck.\n", encoding="utf-8")
    problems = _problems(_report(path))
    assert "symbols" in problems
