"""A rulebook table by player count answers "with N players, how many …?" by its row.

Setups are often a table whose first column is the number of players ("Number of players |
Sherlock Team | Moriarty Team", then "6 | 4 | 2"). A small model, given the table as a
quote, answers with the footnote under it instead. When the
question names a player count and the closest quoted sentence is such a table, the answer
is that row under its header's names, written by no model and checked like any conclusion.
A row whose count or cells are marked for a footnote ("4*- 5" for 4 players) is not
answered from: the note changes it.
"""

from __future__ import annotations

import re

from rag.answering.checks import NUMBER, number_value
from rag.lang import CELL_SEPARATOR, is_number_row
from rag.types import Lang

# The count is read as the checks read numbers: digits, English words, Chinese numerals
# (十二人 is twelve, not the 二人 at its end); 每一个人 (each one) and 第一个人 (the first)
# name no count.
_EN_PLAYERS = re.compile(rf"\b{NUMBER}[\s-]*(?:players?|people|persons|of us)\b", re.IGNORECASE)
_ZH_PLAYERS = re.compile(rf"(?<![每第]){NUMBER}\s*(?:个|名|位)?\s*(?:人|玩家)")
# A header's first cell naming the player count: "Number of players", "Players", 人数.
_PLAYERS_COLUMN = re.compile(r"\bplayers?\b|玩家|人数", re.IGNORECASE)
_CELL = re.compile(rf"\s*{re.escape(CELL_SEPARATOR)}\s*")
_FOOTNOTE = re.compile(r"[*†‡]")


def player_count(question: str, lang: Lang) -> int | None:
    """The number of players a question names ("with 6 players", "6个人玩"), if any."""
    match = (_ZH_PLAYERS if lang == "zh" else _EN_PLAYERS).search(question)
    if match is None:
        return None
    return number_value(match[1])


def _covers(cell: str, players: int) -> bool:
    """Whether a first cell ("6", "4-5", "7*- 8") stands for that many players."""
    bounds = [int(n) for n in re.findall(r"\d+", cell)]
    return len(bounds) in (1, 2) and bounds[0] <= players <= bounds[-1]


def table_row(table: str, players: int) -> list[tuple[str, str]] | None:
    """The (header, value) pairs of a player-count table's row for `players`, the player
    column left out; None when the text is not such a table, has no such row, or the row
    is marked for a footnote for that count ("4*- 5" for 4, not for 5) or in a cell."""
    lines = [line.strip() for line in table.splitlines() if line.strip()]
    if len(lines) < 2 or is_number_row(lines[0]):
        return None
    header = _CELL.split(lines[0])
    if len(header) < 2 or not _PLAYERS_COLUMN.search(header[0]):
        return None
    for line in lines[1:]:
        cells = _CELL.split(line)
        if is_number_row(line) and len(cells) == len(header) and _covers(cells[0], players):
            # "4*- 5": the note is about 4 players, not 5
            marked = re.search(rf"(?<!\d){players}\s*{_FOOTNOTE.pattern}", cells[0])
            if marked or any(_FOOTNOTE.search(cell) for cell in cells[1:]):
                return None
            return list(zip(header[1:], cells[1:], strict=True))
    return None


def row_answer(question: str, lang: Lang, table: str) -> str | None:
    """The answer to a question naming a player count, read off the table's row for it:
    "With 6 players: Sherlock Team 4, Moriarty Team 2." / "6人游戏时：Sherlock Team 为 4，
    Moriarty Team 为 2。"; None when the question names none or the table has no such row."""
    players = player_count(question, lang)
    row = table_row(table, players) if players is not None else None
    if not row:
        return None
    if lang == "zh":
        return (
            f"{players}人游戏时：" + "，".join(f"{name} 为 {value}" for name, value in row) + "。"
        )
    return f"With {players} players: " + ", ".join(f"{name} {value}" for name, value in row) + "."
