"""Chinese section numbering: 第一章, 第二节, 第3条, 一、, （一）, 1.1, （1）.

A numbered line is a heading when what follows its number is a title, not a sentence:
short, and free of sentence punctuation ("一、每位玩家摸13张牌。" is a rule, "一、总则" a
heading). Its rank orders the numbering styles as Chinese documents nest them:
第…编 > 第…章 > 第…节 > 第…条 > 一、 > （一） > 1. > 1.1 > 1.1.1 > （1）. A plain "1." (or
"1、") is a numbered step, which the chunker follows as a list; STEP_RANK places it.
"""

from __future__ import annotations

import re

from rag.lang import CJK_RE

_CN = "[一二三四五六七八九十百千零〇]+"
_ARABIC = "[0-9０-９]+"
_NUMBER = f"(?:{_CN}|{_ARABIC})"
_DOTTED_RE = re.compile(rf"^{_ARABIC}(?:[.．]{_ARABIC})+[.．]?")
_STYLES = (
    (re.compile(rf"^第{_NUMBER}(?:编|部分|篇)"), 0),
    (re.compile(rf"^第{_NUMBER}章"), 1),
    (re.compile(rf"^第{_NUMBER}节"), 2),
    (re.compile(rf"^第{_NUMBER}条"), 3),
    (re.compile(rf"^{_CN}[、．.]"), 4),
    (re.compile(rf"^[（(]{_CN}[）)]"), 5),
)
STEP_RANK = 6
_DEEPEST_DOTTED = 9  # 1.1.1.1 and deeper nest alike
_BRACKETED_ARABIC = (re.compile(rf"^[（(]{_ARABIC}[）)]"), 10)

_AFTER_NUMBER = " \u3000:：.．、-–—"
_SENTENCE_MARKS_RE = re.compile(r"[。，；！？：,;!?]")
_MAX_CJK_TITLE = 20
_MAX_LATIN_TITLE_WORDS = 8


def numbered_rank(line: str) -> int | None:
    """The rank of a numbered heading line ("第一章 基本规则" 1, "（一）摸牌" 5, "1.1 出牌" 7);
    None for any other line, a numbered sentence included."""
    line = line.strip()
    rank, end = _numbering(line)
    if rank is None:
        return None
    title = line[end:].lstrip(_AFTER_NUMBER).rstrip(" \u3000:：")
    return rank if _is_title(title) else None


def without_numbering(line: str) -> str:
    """The line after its Chinese numbering (第一章, 一、, （一）, 1.1 …), if it has one."""
    line = line.strip()
    return line[_numbering(line)[1] :].lstrip(_AFTER_NUMBER)


def _numbering(line: str) -> tuple[int | None, int]:
    for pattern, rank in (*_STYLES, _BRACKETED_ARABIC):
        if match := pattern.match(line):
            return rank, match.end()
    if match := _DOTTED_RE.match(line):
        depth = len(re.findall(r"[.．]\S", match.group()))  # 1.1 -> 1, 1.1.1 -> 2
        return min(STEP_RANK + depth, _DEEPEST_DOTTED), match.end()
    return None, 0


def _is_title(title: str) -> bool:
    if not title:
        return True  # "第一章" alone, its name on the next line
    if _SENTENCE_MARKS_RE.search(title) or title.endswith("."):
        return False
    if CJK_RE.search(title):
        return len(title.replace(" ", "")) <= _MAX_CJK_TITLE
    words = title.split()
    return title[0].isupper() and len(words) <= _MAX_LATIN_TITLE_WORDS
