from pathlib import Path

import pytest

from rag.errors import CorpusError, GameNotFoundError
from rag.reading.corpus import Corpus, slugify
from rag.settings import BUILTIN_CORPUS


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus.load((BUILTIN_CORPUS, True))


def test_builtin_corpus_has_four_games_with_manifests(corpus: Corpus) -> None:
    assert sorted(corpus.slugs) == [
        "deck52-final-bus",
        "maximum-apocalypse",
        "maximum-throwdown-overload",
        "suros",
    ]
    for game in corpus.games:
        assert game.path.is_file()
        assert game.language == "en"
        assert any(any("\u4e00" <= ch <= "\u9fff" for ch in alias) for alias in game.aliases)


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("Maximum Apocalypse", "maximum-apocalypse"),
        ("maximum-apocalypse", "maximum-apocalypse"),
        ("末日启示录", "maximum-apocalypse"),
        ("maximum throwdown", "maximum-throwdown-overload"),
        ("SUROS", "suros"),
        ("deck 52", "deck52-final-bus"),
        ("末班巴士", "deck52-final-bus"),
    ],
)
def test_resolve_by_title_slug_or_alias(corpus: Corpus, name: str, slug: str) -> None:
    assert corpus.resolve(name).slug == slug


def test_resolve_ambiguous_and_unknown_list_the_games(corpus: Corpus) -> None:
    with pytest.raises(GameNotFoundError) as ambiguous:
        corpus.resolve("Maximum")
    assert "several games" in str(ambiguous.value)
    assert "suros" in ambiguous.value.choices
    with pytest.raises(GameNotFoundError, match="Unknown game 'Catan'"):
        corpus.resolve("Catan")


@pytest.mark.parametrize(
    ("question", "slug"),
    [
        ("In Maximum Apocalypse, when can't I do a stealth test?", "maximum-apocalypse"),
        ("末日启示录里怪物生成在玩家格，是立刻激活吗？", "maximum-apocalypse"),
        ("How do bombs work in Maximum Throwdown?", "maximum-throwdown-overload"),
        ("苏罗斯的闪避怎么用？", "suros"),
        ("In Deck 52 what happens when I rest?", "deck52-final-bus"),
        ("when can't I do a stealth test?", None),
        ("Is Maximum better than chess?", None),  # both Maximum games: no guess
    ],
)
def test_detect_game_from_question(corpus: Corpus, question: str, slug: str | None) -> None:
    found = corpus.detect(question)
    assert (found.slug if found else None) == slug


def test_duplicate_slug_is_an_error(tmp_path: Path) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "manifest.toml").write_text(
            'title = "Same"\nslug = "same"\nlanguage = "en"\nfile = "r.txt"\n'
        )
    with pytest.raises(CorpusError, match="Duplicate slug 'same'"):
        Corpus.load((tmp_path, True))


def test_bad_manifest_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "manifest.toml").write_text('title = "G"\n')
    with pytest.raises(CorpusError, match="lacks slug, language, file"):
        Corpus.load((tmp_path, True))


def test_slugify() -> None:
    assert slugify("DECK 52: Final Bus") == "deck-52-final-bus"
    with pytest.raises(CorpusError):
        slugify("末日")


def test_a_two_character_chinese_alias_is_found_in_a_question_but_two_letters_are_not(
    tmp_path: Path,
) -> None:
    for slug, aliases in (("sanguosha", '["国战", "SG"]'), ("other", '["Other Game"]')):
        (tmp_path / slug).mkdir()
        (tmp_path / slug / "manifest.toml").write_text(
            f'title = "{slug.title()}"\nslug = "{slug}"\nlanguage = "zh"\nfile = "r.txt"\n'
            f"aliases = {aliases}\n",
            encoding="utf-8",
        )
        (tmp_path / slug / "r.txt").write_text("规则。\n", encoding="utf-8")
    corpus = Corpus.load((tmp_path, False))
    found = corpus.detect("国战里杀死同势力角色有什么惩罚？")
    assert found is not None and found.slug == "sanguosha"
    assert corpus.detect("does this SG rule apply?") is None  # letters fire inside words
    game = corpus.get("sanguosha")
    assert Corpus.without_names("国战里杀死同势力角色有什么惩罚？", game).startswith("里杀死")
