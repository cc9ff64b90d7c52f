"""The rulebook as printed, over a live server: a PDF page with a quote highlighted, its
layout, a section as HTML with the quote marked, the table of contents; their caching
headers, errors, and the same keys and origins as every other route."""

from __future__ import annotations

from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any
from urllib.parse import quote as escaped

import httpx
import pytest
from PIL import Image
from test_api import error_of
from test_showing import ACROSS_COLUMNS, WRAPPING, race_pdf

from rag.contents import table_of_contents
from rag.pipeline import Pipeline

PAGE = "/v1/games/cube-race/pages"


@pytest.fixture
def race(pipeline: Pipeline, tmp_path: Path) -> Pipeline:
    """The built-in books and a two-page PDF, "Cube Race"."""
    pipeline.add_book(race_pdf(tmp_path / "race.pdf"), "Cube Race")
    return pipeline


@pytest.fixture
def client(serve_api: Any, race: Pipeline) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=serve_api(race, max_question_chars=200), timeout=30) as client:
        yield client


def _png_width(response: httpx.Response) -> int:
    assert response.headers["content-type"] == "image/png"
    return Image.open(BytesIO(response.content)).width


def test_a_page_image_is_cached_by_its_etag(client: httpx.Client, race: Pipeline) -> None:
    response = client.get(f"{PAGE}/1.png", params={"quote": WRAPPING})
    assert response.status_code == 200
    assert _png_width(response) == race.settings.showing.width
    assert response.headers["cache-control"] == "private, max-age=86400"
    etag = response.headers["etag"]
    again = client.get(f"{PAGE}/1.png", params={"quote": WRAPPING}, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
    narrow = client.get(f"{PAGE}/1.png", params={"quote": WRAPPING, "width": 400})
    assert _png_width(narrow) == 400 and narrow.headers["etag"] != etag
    plain = client.get(f"{PAGE}/1.png", headers={"If-None-Match": etag})  # another image
    assert plain.status_code == 200 and plain.headers["etag"] not in (etag, narrow.headers["etag"])


def test_a_page_layout_gives_the_quote_s_boxes_and_its_image(client: httpx.Client) -> None:
    page = client.get(f"{PAGE}/1", params={"quote": ACROSS_COLUMNS}).json()
    assert {k: page[k] for k in ("game", "title", "page", "pages")} == {
        "game": "cube-race", "title": "Cube Race", "page": 1, "pages": 2,
    }  # fmt: skip
    assert (round(page["width"]), round(page["height"])) == (595, 842)  # A4, in points
    boxes = page["highlights"]
    assert len(boxes) == 4 and boxes[0]["x0"] < 0.5 < boxes[-1]["x0"]  # on into column two
    assert all(0 <= box[k] <= 1 for box in boxes for k in ("x0", "top", "x1", "bottom"))
    assert page["image"] == f"{PAGE}/1.png?quote={escaped(ACROSS_COLUMNS, safe='')}".replace(
        "%20", "+"
    )
    image = client.get(page["image"])
    direct = client.get(f"{PAGE}/1.png", params={"quote": ACROSS_COLUMNS})
    assert image.headers["etag"] == direct.headers["etag"]
    bare = client.get(f"{PAGE}/2").json()
    assert bare["highlights"] == [] and bare["image"] == f"{PAGE}/2.png"


def test_pages_that_are_not_there_are_404_and_bad_quotes_422(client: httpx.Client) -> None:
    for route in ("{}.png", "{}"):
        for page in (0, 3):
            error = error_of(client.get(f"{PAGE}/{route.format(page)}"), 404, "page_not_found")
            assert "2 pages" in error["message"]
        no_pages = error_of(client.get(f"/v1/games/suros/pages/{route.format(1)}"), 404, "no_pages")
        assert "/v1/games/suros/sections/" in no_pages["message"]
        assert "/view" in no_pages["message"]
        error_of(client.get(f"/v1/games/chess/pages/{route.format(1)}"), 404, "game_not_found")
        absent = client.get(f"{PAGE}/{route.format(2)}", params={"quote": WRAPPING})
        assert "page 2" in error_of(absent, 422, "quote_not_found")["message"]
        long = client.get(f"{PAGE}/{route.format(1)}", params={"quote": "word " * 50})
        assert "200 characters" in error_of(long, 422, "invalid_request")["message"]
    for width in (50, 5000):
        error_of(client.get(f"{PAGE}/1.png", params={"width": width}), 422, "invalid_request")


def test_a_section_view_marks_the_quote(client: httpx.Client, race: Pipeline) -> None:
    chunk = next(c for c in race.chunks("cube-race") if WRAPPING in c.text)
    view = f"/v1/games/cube-race/sections/{chunk.id}/view"
    response = client.get(view, params={"quote": WRAPPING})
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert "script-src" not in response.headers["content-security-policy"]  # none may run
    assert response.headers["cache-control"] == "private, max-age=86400"
    assert f'<mark id="rk-quote">{WRAPPING}</mark>' in response.text
    etag = response.headers["etag"]
    cached = client.get(view, params={"quote": WRAPPING}, headers={"If-None-Match": f"W/{etag}"})
    assert cached.status_code == 304
    number = table_of_contents(race.chunks("cube-race"))[0].number
    by_number = client.get(f"/v1/games/cube-race/sections/{number}/view").text
    assert "<mark" not in by_number and "Each player takes three red cubes" in by_number
    suros = client.get("/v1/games/suros/sections/setup/view", params={"quote": "each player"})
    assert suros.status_code == 200 and 'id="rk-quote"' in suros.text
    absent = client.get(view, params={"quote": "Roll two dice and shout."})
    error_of(absent, 422, "quote_not_found")
    error_of(client.get("/v1/games/suros/sections/nothing-like-it/view"), 404, "section_not_found")
    error_of(client.get("/v1/games/suros/sections/999/view"), 404, "section_not_found")


def test_the_contents_name_pages_for_a_pdf_only(client: httpx.Client, race: Pipeline) -> None:
    contents = client.get("/v1/games/Cube Race/contents").json()
    assert (contents["game"], contents["has_pages"], contents["pages"]) == ("cube-race", True, 2)
    toc = table_of_contents(race.chunks("cube-race"))
    assert [s["number"] for s in contents["sections"]] == [s.number for s in toc]
    assert [s["chunk_id"] for s in contents["sections"]] == [s.chunks[0].id for s in toc]
    assert [s["pages"] for s in contents["sections"]] == [s.pages for s in toc]
    assert [s["path"] for s in contents["sections"]] == [list(s.path) for s in toc]
    assert all(s["title"] == s["path"][-1] for s in contents["sections"])
    suros = client.get("/v1/games/suros/contents").json()
    assert (suros["has_pages"], suros["pages"]) == (False, None) and suros["sections"]


def test_pages_take_the_same_keys_and_origins(serve_api: Any, race: Pipeline) -> None:
    shop = "https://shop.example"
    url = serve_api(race, publishable_keys=[{"key": "pk_shop", "origins": [shop]}])
    with httpx.Client(base_url=url, timeout=30) as client:
        for path in (f"{PAGE}/1.png", f"{PAGE}/1", "/v1/games/suros/sections/1/view",
                     "/v1/games/suros/contents"):  # fmt: skip
            error_of(client.get(path), 401, "unauthorized")
            elsewhere = {"X-API-Key": "pk_shop", "Origin": "https://elsewhere.example"}
            error_of(client.get(path, headers=elsewhere), 403, "origin_not_allowed")
            mine = client.get(path, headers={"X-API-Key": "pk_shop", "Origin": shop})
            assert mine.status_code == 200
            assert mine.headers["access-control-allow-origin"] == shop
