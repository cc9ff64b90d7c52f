from itertools import pairwise
from pathlib import Path

import pytest

from rag.reading.chunking import chunk_document
from rag.reading.corpus import Corpus
from rag.reading.files import load_document
from rag.types import Chunk, Document, GameInfo, PageSpan

CORPUS = Corpus.load((Path("corpus"), True))
MA = "Maximum Apocalypse"


def _chunk_book(game: GameInfo) -> list[Chunk]:
    return chunk_document(load_document(game.path, game.slug), game)


@pytest.fixture(scope="module")
def chunks() -> dict[str, list[Chunk]]:
    return {game.slug: _chunk_book(game) for game in CORPUS.games}


def _containing(chunks: list[Chunk], text: str) -> list[Chunk]:
    return [c for c in chunks if text in c.text]


def _synthetic(text: str, title: str = "Space Race") -> tuple[Document, GameInfo]:
    game = GameInfo("space-race", title, (), "en", "test", Path("book.txt"))
    return Document(game="space-race", text=text, source="test"), game


# ---------------------------------------------------------------- sections of the real books


def test_stealth_test_sits_under_move(chunks: dict[str, list[Chunk]]) -> None:
    [stealth] = _containing(chunks["maximum-apocalypse"], "Stealth test Roll the two Spawn dice")
    assert stealth.section == (MA, "Playing the Game", "3. Player Actions", "Move", "Stealth test")
    assert stealth.text.startswith("Stealth test Roll the two Spawn dice, and compare")
    [encounter] = _containing(chunks["maximum-apocalypse"], "It is dangerous to enter tiles")
    assert encounter.section[-2:] == ("Move", "Encountering monster tokens")
    assert "If you enter a tile with at least one Monster token and DO NOT" in encounter.text


def test_playing_the_game_outline(chunks: dict[str, list[Chunk]]) -> None:
    paths = [c.section[1:] for c in chunks["maximum-apocalypse"]]
    first = paths.index(("Playing the Game",))
    play, actions, move = "Playing the Game", "3. Player Actions", "Move"
    assert paths[first : first + 17] == [
        (play,),
        (play, "Map Tiles"),
        (play, "1. Spawn Monsters"),
        (play, "2. Draw a Card"),
        (play, actions),
        (play, actions, move),
        (play, actions, move, "Encountering monster tokens"),
        (play, actions, move, "Stealth test"),
        (play, actions, "Draw"),
        (play, actions, "Scavenge"),
        (play, actions, "Play a Card"),
        (play, actions, "Play a Card", "Instant Actions"),
        (play, actions, "Play a Card", "Equipping Gear"),
        (play, actions, "Instant Actions"),
        (play, actions, "Gear Cards"),
        (play, actions, "Perform a Card Action"),
        (play, actions, "Free Actions"),
    ]
    # Contents entries between steps 3 and 4 are top level; step 4 returns to the list.
    assert ("Damage and Combat",) in paths
    assert (play, "4. Monster Activation") in paths
    assert (play, "5. Hunger and other Status Effects", "Starvation") in paths
    # A heading after the last step closes the list.
    assert ("End of Game",) in paths
    assert ("Game Setup", "5. Organize Scavenge Decks", "Scavenge cards") in paths
    assert ("Example Setup (Mission 1)", "Mission 0: Tutorial") in paths


def test_sentences_are_not_mistaken_for_headings(chunks: dict[str, list[Chunk]]) -> None:
    ma = chunks["maximum-apocalypse"]
    [damage] = _containing(ma, "Many cards have a Health value")
    assert damage.section == (MA, "Damage and Combat")
    [credits] = _containing(ma, "Original Artwork: Gustav Rangmar")
    assert credits.section == (MA, "Credits")
    [callouts] = _containing(ma, "A. Scavenge Icon This icon")
    assert callouts.section == (MA, "Playing the Game", "Map Tiles")


def test_suros_dodge_is_its_own_glossary_chunk(chunks: dict[str, list[Chunk]]) -> None:
    suros = chunks["suros"]
    [dodge] = _containing(suros, "DODGE - ")
    assert dodge.section[-2:] == ("PLAYER ACTIONS", "DODGE")
    assert dodge.section == ("Suros", "PLAYER ACTIONS", "DODGE")
    assert dodge.kind == "glossary"
    assert dodge.text.startswith("DODGE - This ability can be performed")
    assert "LUCK" not in dodge.text and "MOVE - " not in dodge.text
    actions = [c.section[-1] for c in suros if c.section[-2:-1] == ("PLAYER ACTIONS",)]
    assert actions == ["MOVE", "DODGE", "LUCK", "CRAFT", "REVIVE", "EQUIP"]


def test_suros_icon_legend_entries(chunks: dict[str, list[Chunk]]) -> None:
    [target] = _containing(chunks["suros"], "TARGET - The target of this attack.")
    assert target.kind == "glossary"
    assert target.section[-2:] == ("MUTANT ATTACK CARDS", "TARGET")
    assert target.text == "TARGET - The target of this attack."
    [events] = _containing(chunks["suros"], "EVENT SYMBOLS mean something special")
    assert events.section[-1] == "EVENT SYMBOLS"


@pytest.mark.parametrize("term", ["Stun", "Docile", "Cure", "Drain Life", "Non-friendly"])
def test_maximum_apocalypse_glossary_terms(chunks: dict[str, list[Chunk]], term: str) -> None:
    [entry] = [c for c in chunks["maximum-apocalypse"] if c.section == (MA, "Glossary", term)]
    assert entry.kind == "glossary"
    assert entry.text.startswith(f"{term}: ")
    assert entry.text.count("\n") == 0


def test_other_books_glossaries(chunks: dict[str, list[Chunk]]) -> None:
    throwdown = chunks["maximum-throwdown-overload"]
    [steal] = [c for c in throwdown if c.section[1:] == ("Icon Abilities", "Steal")]
    assert steal.kind == "glossary" and steal.text.startswith("Steal - Steal a card")
    # Paragraphs between two entries belong to the earlier one.
    [enchant] = [c for c in throwdown if c.section[1:] == ("Icon Abilities", "Enchant")]
    assert "the supply of enchantment tokens is limited" in enchant.text
    deck = chunks["deck52-final-bus"]
    [rest] = [c for c in deck if c.section[1:] == ("Icons", "Rest")]
    assert rest.text == "- Rest: A Hero may rest if TIRED. Flip the Status card."
    [difficulty] = _containing(deck, "Difficulty. To make the game harder")
    assert difficulty.section[1:] == ("Optional Rules", "Difficulty")


# ---------------------------------------------------------------- invariants on every book


def test_suros_outline_nests_only_what_its_headings_show(chunks: dict[str, list[Chunk]]) -> None:
    paths = [c.section[1:] for c in chunks["suros"]]
    assert paths[1:4] == [
        ("GAME START UP", "GAIN PLAYER BOARDS"),
        ("GAIN STARTING GEAR",),
        ("SETUP THE ATTACK BOARD",),
    ]
    for title in (
        "TURNS & ROUNDS",
        "THE MAP",
        "SPECIAL RULES & ACTIONS",
        "MOVEMENT",
        "PLAYER MOVEMENT",
        "GEAR",
        "READY TO PLAY?",
    ):
        assert (title,) in paths
    assert ("MUTANT ATTACK CARDS", "TARGET") in paths
    [movement] = _containing(chunks["suros"], "Players and enemies move differently")
    assert movement.section == ("Suros", "MOVEMENT")


def test_every_chunk_is_clean_and_in_its_book(chunks: dict[str, list[Chunk]]) -> None:
    for game in CORPUS.games:
        doc = load_document(game.path, game.slug)
        for chunk in chunks[game.slug]:
            assert chunk.game == game.slug
            assert chunk.section[0] == game.title
            assert chunk.text == doc.text[chunk.start : chunk.end]
            assert chunk.text.strip() and len(chunk.text) <= 1200
            assert chunk.lang == "en" and chunk.page is None
            for chrome in ("RulesPal", "Table of Contents", "thumbnail", "\nChat\n"):
                assert chrome not in chunk.text
            assert not any(line.startswith("#") for line in chunk.text.split("\n"))


def test_suros_is_named_from_its_manifest(chunks: dict[str, list[Chunk]]) -> None:
    assert "Suros" not in load_document(CORPUS.get("suros").path, "suros").text
    assert {c.section[0] for c in chunks["suros"]} == {"Suros"}


def test_ids_are_unique_and_stable(chunks: dict[str, list[Chunk]]) -> None:
    ids = [c.id for book in chunks.values() for c in book]
    assert len(ids) == len(set(ids))
    again = [c.id for game in CORPUS.games for c in _chunk_book(game)]
    assert again == ids
    assert all(c.id.startswith(f"{c.game}:") for book in chunks.values() for c in book)


# ---------------------------------------------------------------- splitting and edge cases


def test_long_section_splits_on_sentences_with_overlap() -> None:
    sentences = [f"Rule number {n} says a player may draw {n} cards." for n in range(60)]
    text = "Long Rules\n" + " ".join(sentences[:30]) + "\n" + " ".join(sentences[30:])
    doc, game = _synthetic(text)
    parts = chunk_document(doc, game, max_chars=400, overlap_chars=120)
    assert len(parts) > 5
    assert {p.section for p in parts} == {("Space Race", "Long Rules")}
    assert all(len(p.text) <= 400 and p.text.endswith(".") for p in parts)
    for before, after in pairwise(parts):
        assert after.start < before.end  # the overlap repeats whole sentences...
        assert before.end - after.start <= 120  # ...within the budget
        assert after.text.startswith("Rule number")
    assert parts[0].start == text.index("Rule number 0")
    assert parts[-1].end == len(text)


def test_a_page_break_starts_a_new_passage() -> None:
    text = "Setup\nDeal the role cards.\nDeal five wire cards.\nShuffle them."
    turn = text.index("Deal five")
    doc = Document(
        game="space-race",
        text=text,
        source="test",
        pages=(PageSpan(0, turn, 8), PageSpan(turn, len(text), 9)),
    )
    _, game = _synthetic(text)
    parts = chunk_document(doc, game)
    assert [(p.text, p.page) for p in parts] == [
        ("Deal the role cards.", 8),
        ("Deal five wire cards.\nShuffle them.", 9),
    ]
    assert {p.section for p in parts} == {("Space Race", "Setup")}


def test_heading_without_body_makes_no_chunk_and_parents_nest() -> None:
    doc, game = _synthetic(
        "SETUP\nPLAYER BOARDS\nTake a board.\nEMPTY SECTION\nEND NOTES\nBye now."
    )
    assert [c.section for c in chunk_document(doc, game)] == [
        ("Space Race", "SETUP", "PLAYER BOARDS"),
        ("Space Race", "EMPTY SECTION", "END NOTES"),
    ]


def test_parent_of_its_own_shape_holds_only_the_heading_after_it() -> None:
    doc, game = _synthetic(
        "SETUP\nBOARDS\nTake a board.\nDICE\nRoll the dice.\n"
        "Playing\nTurns\nTake turns.\nScoring\nCount points."
    )
    assert [c.section[1:] for c in chunk_document(doc, game)] == [
        ("SETUP", "BOARDS"),
        ("DICE",),
        ("Playing", "Turns"),
        ("Scoring",),
    ]


def test_parent_of_another_shape_holds_what_follows() -> None:
    doc, game = _synthetic("SETUP\nBoards\nTake a board.\nDice\nRoll the dice.")
    assert [c.section[1:] for c in chunk_document(doc, game)] == [
        ("SETUP", "Boards"),
        ("SETUP", "Dice"),
    ]


def test_a_recap_holds_the_titles_it_repeats() -> None:
    doc, game = _synthetic(
        "Setup\nTake a board.\nTurns\nTake turns.\n"
        "Quick Reference\nSetup\n- Board.\nTurns\n- Turns.\nCredits\nUs."
    )
    assert [c.section[1:] for c in chunk_document(doc, game)] == [
        ("Setup",),
        ("Turns",),
        ("Quick Reference", "Setup"),
        ("Quick Reference", "Turns"),
        ("Credits",),
    ]


def test_title_repeated_after_a_heading_without_text_is_dropped() -> None:
    doc, game = _synthetic(
        "SPECIAL RULES\nMaps have rules.\nMOVEMENT\nSPECIAL RULES\nPlayers move.\n"
        "ENEMY MOVEMENT\nEnemies move."
    )
    chunks = chunk_document(doc, game)
    assert [(c.section[1:], c.text) for c in chunks] == [
        (("SPECIAL RULES",), "Maps have rules."),
        (("MOVEMENT",), "Players move."),
        (("ENEMY MOVEMENT",), "Enemies move."),
    ]


def test_game_title_lines_are_not_sections() -> None:
    doc, game = _synthetic("Space Race Rulebook\nSetup\nTake a board.")
    assert [c.section for c in chunk_document(doc, game)] == [("Space Race", "Setup")]


def test_chinese_sections_and_glossary() -> None:
    text = (
        "游戏准备\n将地图板放在桌子中央。每位玩家拿取一张角色卡！\n术语\n"
        "眩晕：被眩晕的怪物在本回合不会攻击。\n中毒：回合结束时受到1点伤害。"
    )
    doc, game = _synthetic(text, title="末日启示录")
    chunks = chunk_document(doc, game)
    assert [(c.section, c.kind, c.lang) for c in chunks] == [
        (("末日启示录", "游戏准备"), "section", "zh"),
        (("末日启示录", "术语", "眩晕"), "glossary", "zh"),
        (("末日启示录", "术语", "中毒"), "glossary", "zh"),
    ]


def test_chinese_numbered_headings_nest_by_rank(tmp_path: Path) -> None:
    path = tmp_path / "mahjong.txt"
    path.write_text(
        "第一章 基本规则\n一、总则\n本规则适用于四人对局。\n二、摸牌与出牌\n（一）摸牌\n"
        "轮到你时，从牌墙摸一张牌。\n1、补花\n摸到花牌时立即补一张。\n1.1 补花的时机\n"
        "只有摸牌以后才能补花。\n2、杠后摸牌\n开杠后从牌墙尾部摸一张牌。\n（二）出牌\n"
        "摸牌后打出一张牌。\n第二章 计分\n第3条\n和牌后计算番数。\n",
        encoding="utf-8",
    )
    game = GameInfo("mahjong", "麻将", (), "zh", "", path)
    chapter, draw_and_play, draw = "第一章 基本规则", "二、摸牌与出牌", "（一）摸牌"
    assert [c.section[1:] for c in _chunk_book(game)] == [
        (chapter, "一、总则"),
        (chapter, draw_and_play, draw),
        (chapter, draw_and_play, draw, "1、补花"),
        (chapter, draw_and_play, draw, "1、补花", "1.1 补花的时机"),
        (chapter, draw_and_play, draw, "2、杠后摸牌"),
        (chapter, draw_and_play, "（二）出牌"),
        ("第二章 计分", "第3条"),
    ]


@pytest.mark.parametrize(
    "line",
    [
        "一、每位玩家开始时摸13张牌。",  # a sentence: its full stop
        "第3条 每位玩家摸13张牌，然后出牌",  # a clause: its comma
        "（一）轮到你时必须先摸一张牌然后才能打出一张手牌",  # too long for a title
    ],
)
def test_a_numbered_sentence_is_not_a_heading(line: str) -> None:
    doc, game = _synthetic(f"一、总则\n{line}\n本规则适用于四人对局。", title="麻将")
    assert [c.section for c in chunk_document(doc, game)] == [("麻将", "一、总则")]


def test_document_of_another_game_is_refused() -> None:
    doc, game = _synthetic("Setup\nTake a board.")
    other = GameInfo("suros", "Suros", (), "en", "", Path("x"))
    with pytest.raises(ValueError):
        chunk_document(doc, other)
    with pytest.raises(ValueError):
        chunk_document(doc, game, max_chars=100, overlap_chars=100)
