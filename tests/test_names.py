"""Game names at `rules add` and lookups: a name another game already answers to is refused
(naming the holder), an exact slug always finds its game, and a Chinese-only title takes its
slug from a Latin-letter alias."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cli.errors import ExitCode
from cli.main import app
from cli.state import CliState
from rag.errors import CorpusError
from rag.pipeline import Pipeline
from rag.reading.corpus import write_manifest
from rag.types import GameInfo

MA = "Maximum Apocalypse (maximum-apocalypse)"


def _add(pipeline: Pipeline, path: Path, title: str, *aliases: str) -> Result:
    state = CliState(lambda: pipeline)
    args = ["add", str(path), "--title", title]
    for alias in aliases:
        args += ["--alias", alias]
    return CliRunner().invoke(app, args, obj=state)


def _refused(result: Result, *fragments: str) -> str:
    """The one error line of a refused command, checked for the user-error exit code."""
    assert result.exit_code == ExitCode.USER_ERROR, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def _user_books(pipeline: Pipeline) -> list[str]:
    folder = pipeline.settings.user_books_dir
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.mark.parametrize(
    ("title", "aliases", "holder"),
    [
        ("MaxApoc", (), MA),  # another game's alias
        ("maximum apocalypse", (), MA),  # its title
        ("Pebble Race", ("末日启示录",), MA),
        ("Pebble Race", ("MAX-APOC",), MA),
        ("Pebble Race", ("ＭａｘＡｐｏｃ",), MA),  # full width
        ("Pebble Race", ("suros",), "Suros (suros)"),  # another game's slug
        ("Throwdown 二", (), "Maximum Throwdown: Overload (maximum-throwdown-overload)"),  # slug
    ],
)
def test_add_refuses_a_name_another_game_uses_and_names_it(
    pipeline: Pipeline, rulebook: Path, title: str, aliases: Sequence[str], holder: str
) -> None:
    line = _refused(_add(pipeline, rulebook, title, *aliases), "already exists", holder)
    kind = "alias" if aliases else "slug" if "二" in title else "title"
    assert f"The {kind} " in line
    assert _user_books(pipeline) == []  # nothing written


def test_add_refuses_a_slug_an_added_book_has(pipeline: Pipeline, rulebook: Path) -> None:
    assert _add(pipeline, rulebook, "Pebble Race").exit_code == 0
    _refused(_add(pipeline, rulebook, "Pebble Race 二"), "slug 'pebble-race'", "(pebble-race)")
    assert _user_books(pipeline) == ["pebble-race"]


def _write_user_book(pipeline: Pipeline, slug: str, title: str, aliases: tuple[str, ...]) -> None:
    """A user book as an earlier, careless `rules add` could have left it."""
    folder = pipeline.settings.user_books_dir / slug
    folder.mkdir(parents=True)
    (folder / "rulebook.md").write_text("# Rules\n\nRoll a die.\n", encoding="utf-8")
    game = GameInfo(slug, title, aliases, "en", "", folder / "rulebook.md", builtin=False)
    write_manifest(folder, game)


def test_an_exact_slug_wins_over_another_games_alias(pipeline: Pipeline) -> None:
    # The fan book's slug is the built-in game's alias, and its alias the built-in's slug.
    _write_user_book(pipeline, "maxapoc", "Max Apoc Fan Edition", ("maximum-apocalypse",))
    corpus = pipeline.corpus
    assert corpus.resolve("maxapoc").slug == "maxapoc"
    assert corpus.resolve(" MaxApoc ").slug == "maxapoc"
    assert corpus.resolve("maximum-apocalypse").slug == "maximum-apocalypse"
    removed = pipeline.remove_book("maxapoc")
    assert removed.slug == "maxapoc" and _user_books(pipeline) == []
    assert pipeline.corpus.resolve("maxapoc").slug == "maximum-apocalypse"  # the alias again


def test_remove_by_slug_when_another_game_answers_to_it(pipeline: Pipeline) -> None:
    _write_user_book(pipeline, "deck52", "Deck 52 Fan Cards", ())  # DECK52: a built-in alias
    removed = CliRunner().invoke(app, ["remove", "deck52"], obj=CliState(lambda: pipeline))
    assert removed.exit_code == 0, removed.output
    assert "Removed Deck 52 Fan Cards (deck52)." in removed.stdout
    assert _user_books(pipeline) == []


def test_a_chinese_title_takes_its_slug_from_the_first_latin_alias(
    pipeline: Pipeline, rulebook: Path
) -> None:
    added = pipeline.add_book(rulebook, "三国杀", ["国战", "Sanguosha", "SGS"]).game
    assert added.slug == "sanguosha"
    assert added.title == "三国杀" and added.aliases == ("国战", "Sanguosha", "SGS")
    assert pipeline.corpus.resolve("三国杀").slug == "sanguosha"


def test_a_chinese_title_without_a_latin_alias_is_told_to_give_one(
    pipeline: Pipeline, rulebook: Path
) -> None:
    _refused(_add(pipeline, rulebook, "三国杀"), "--alias", "Latin")
    with pytest.raises(CorpusError, match="--alias sanguosha"):
        pipeline.add_book(rulebook, "三国杀", ["国战"])
    assert _user_books(pipeline) == []
