import pytest

from rag.answering.tables import player_count, row_answer, table_row
from rag.types import Lang

ROLES = "Number of players | Sherlock Team | Moriarty Team\n4*- 5 | 3 | 2\n6 | 4 | 2\n7*- 8 | 5 | 3"


@pytest.mark.parametrize(
    ("question", "lang", "players"),
    [
        ("With 6 players, how many are on each team?", "en", 6),
        ("there are six of us, how many Moriarty players?", "en", 6),
        ("In a 5-player game who starts?", "en", 5),
        ("6个人玩的话，夏洛克和莫里亚蒂各有几个人？", "zh", 6),
        ("三人局每人几颗骰子？", "zh", 3),
        ("十二人玩的话要几套牌？", "zh", 12),
        ("一个人玩可以吗？", "zh", 1),
        ("每一个人几张牌？", "zh", None),
        ("第一个人先做什么？", "zh", None),
        ("With eleven players, how many wires?", "en", 11),
        ("we often players swap seats, how many teams?", "en", None),
        ("How many cards does each player get?", "en", None),
        ("每人几张牌？", "zh", None),
    ],
)
def test_the_player_count_a_question_names(question: str, lang: Lang, players: int | None) -> None:
    assert player_count(question, lang) == players


def test_a_player_count_tables_row_is_read_under_its_header() -> None:
    assert table_row(ROLES, 6) == [("Sherlock Team", "4"), ("Moriarty Team", "2")]
    assert table_row(ROLES, 8) == [("Sherlock Team", "5"), ("Moriarty Team", "3")]  # "7*- 8"
    assert table_row(ROLES, 4) is None  # its footnote changes the row
    assert table_row(ROLES, 9) is None  # no row
    assert table_row("Players | Cards\n2 | 7*\n3 | 6", 2) is None  # a cell with a footnote
    # not a player-count table: its first column counts something else, or it has no header
    assert table_row("Round | Cards\n1 | 5\n2 | 4", 2) is None
    assert table_row("4 | 15 | 4 | 1\n6 | 23 | 6 | 1", 6) is None


def test_a_question_naming_a_player_count_is_answered_by_the_row() -> None:
    assert row_answer("With 6 players, how many are on each team?", "en", ROLES) == (
        "With 6 players: Sherlock Team 4, Moriarty Team 2."
    )
    assert row_answer("6个人玩的话，夏洛克和莫里亚蒂各有几个人？", "zh", ROLES) == (
        "6人游戏时：Sherlock Team 为 4，Moriarty Team 为 2。"
    )
    assert row_answer("How many teams are there?", "en", ROLES) is None
