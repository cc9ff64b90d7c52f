"""Language helpers shared by ingest, chunking, retrieval and answering: detection,
sentences, tokens, negations.

Tokens are for BM25 and length estimates, not for models: lowercase latin words and
numbers, Chinese words as jieba segments them, stopwords and punctuation dropped.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Iterator
from functools import cache
from typing import Any

from rag.types import Lang

# CJK ideographs (basic, extension A, compatibility); kana are rare in our books.
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
CJK_RE = re.compile(f"[{_CJK}]")
# 不 as a negation: not in words where it negates nothing (不同 different, 不过 but, 不断
# constantly, 不仅 not only …).
ZH_NEGATING_BU = "不(?![同断仅过少久论管如料妨但])"
# A negation, English or Chinese: counted by the checks (does a claim keep its rule's "not"?)
# and by rewording (is the rule closest to a question negative?).
_EN_NEGATION = re.compile(
    r"\b(?:not|no|never|cannot|none|nothing|nobody|neither|nor|without|unless)\b|n't\b",
    re.IGNORECASE,
)
# 不 where it negates (ZH_NEGATING_BU), 无 except 无论 (whatever), 非 except 非常 (very); 除非
# (unless) counts through its 非.
_ZH_NEGATION = re.compile(ZH_NEGATING_BU + r"|没|无(?!论)|未|非(?!常)|勿|禁止")


def negations(text: str) -> int:
    """How many negations a text holds, English or Chinese."""
    text = text.replace("\u2019", "'")
    return len(_EN_NEGATION.findall(text)) + len(_ZH_NEGATION.findall(text))


# English in brackets inside Chinese text, a game term's gloss: 潜行判定（Stealth test）.
ENGLISH_GLOSS = re.compile(r"[（(]([^（）()]*[A-Za-z][^（）()]*)[）)]")

# Between a table row's cells, as PDF reading writes them ("4*- 5 | 3 | 2").
CELL_SEPARATOR = "|"
CELL_MARK = f" {CELL_SEPARATOR} "
# A table cell holding a number ("15", "4*-", "2/3"): a line of them is a table's row.
_NUMBER_CELL = re.compile(r"[\d*+\-–/%.,()]*\d[\d*+\-–/%.,()]*")


def is_number_row(line: str) -> bool:
    """Whether a line is numbers alone ("7*- 8 5 3", "4 | 15 | 4 | 1"), a table's row."""
    cells = [c for c in line.split() if c != CELL_SEPARATOR]
    return len(cells) >= 2 and all(map(_NUMBER_CELL.fullmatch, cells))


_LATIN_WORD_RE = re.compile(r"[A-Za-z]+")
# A Chinese character weighs about as much as a latin word; above this share, text is zh.
_ZH_SHARE = 0.3

_WORD_RE = re.compile(f"(?P<cjk>[{_CJK}]+)|(?P<latin>[a-z0-9]+(?:'[a-z]+)*)")

_STOPWORD_LIST = """
    a an the and or but nor if then else than so as of to in on at by for with from into
    onto upon about over under after before during until while within without
    is are was were be been being am do does did doing done have has had having
    can could may might must shall should will would cannot can't won't don't doesn't
    i me my mine we us our you your yours he him his she her it its they them their
    this that these those there here what which who whom whose when where why how
    not no yes also just only very too any each every some such both either neither
    all other more most own same out up down off again further once
    的 了 吗 呢 吧 啊
"""
STOPWORDS = frozenset(_STOPWORD_LIST.split())

# Sentence ends: Chinese marks need no space after them; latin ones need a space or the end.
_SENTENCE_END_RE = re.compile(r"[。！？]+[」』”’）\"')]*|[.!?]+[\"'”’)\]]*(?=\s|$)|\n")
# Chinese quotation marks and brackets: a rulebook quotes card text in them, stops and all
# (记载了『1回合只能使用1次。』文本的卡), and a stop inside them ends no sentence.
_OPENING_MARKS = "「『“（"
_CLOSING_MARKS = "」』”）"
# Words whose trailing period does not end a sentence ("e.g.", "see p. 12").
_ABBREVIATION_LIST = "e.g i.e eg ie vs cf ex approx incl fig p pp mr mrs ms dr"
_ABBREVIATIONS = frozenset(_ABBREVIATION_LIST.split())


# Japanese kana (the middle dot ・ left out: Chinese writes names with it) and Korean
# Hangul: languages Rulekeeper does not answer in.
_OTHER_SCRIPT_RE = re.compile(
    r"[\u3041-\u3096\u3099-\u30fa\u30fc-\u30ff\u31f0-\u31ff\uff66-\uff9f"
    r"\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]"
)
# Above this share of the text's letters (a kana or Hangul character, a Chinese character and
# a Latin word each count one), text is in another language: a stray kana in Chinese is not.
_OTHER_SHARE = 0.1


def unsupported_language(text: str) -> bool:
    """Whether the text is Japanese or Korean, which Rulekeeper answers in English."""
    other = len(_OTHER_SCRIPT_RE.findall(text))
    if other == 0:
        return False
    letters = other + len(CJK_RE.findall(text)) + len(_LATIN_WORD_RE.findall(text))
    return other / letters >= _OTHER_SHARE


def detect_lang(text: str) -> Lang:
    """'zh' when Chinese characters make up a meaningful share of the words, else 'en'
    (Japanese and Korean too: their Chinese characters do not make them Chinese)."""
    if unsupported_language(text):
        return "en"
    cjk = len(CJK_RE.findall(text))
    if cjk == 0:
        return "en"
    latin_words = len(_LATIN_WORD_RE.findall(text))
    return "zh" if cjk / (cjk + latin_words) >= _ZH_SHARE else "en"


def _open_marks(text: str) -> int:
    """How many Chinese quotation marks or brackets are open at the end of `text`."""
    depth = 0
    for char in text:
        if char in _OPENING_MARKS:
            depth += 1
        elif char in _CLOSING_MARKS and depth:
            depth -= 1
    return depth


def _is_quoted_stop(text: str, dot: int, end: int) -> bool:
    """True when the stop at `dot` is inside a quotation that the sentence goes on after:
    the quotation closes later on the line, or closes with the stop and the line goes on."""
    line_start = text.rfind("\n", 0, dot) + 1
    if not _open_marks(text[line_start:dot]):
        return False
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    if _open_marks(text[line_start:end]):
        return not _open_marks(text[line_start:line_end])
    return bool(text[end:line_end].strip())


def _is_false_stop(text: str, start: int, dot: int, end: int) -> bool:
    """True when the period at `dot` belongs to an abbreviation or an enumeration, or the
    stop to a quotation inside the sentence."""
    if text[dot] in "。！？":
        return _is_quoted_stop(text, dot, end)
    before = text[start:dot].split()
    if text[dot] != "." or not before:
        return False
    word = before[-1].lstrip("([\"'").lower()
    if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
        return True  # "e.g.", "see p. 12", "A. Card Type"
    if len(before) == 1 and word.isdigit():
        return True  # "3. Player Actions": a number opening the sentence enumerates
    return text[end:].lstrip(" \t")[:1].islower()


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the sentences of `text`, stripped of surrounding space.

    Splits after . ! ? (followed by space or the end) and after 。！？ outside quotations,
    keeping the punctuation; a newline always ends a sentence, since lines are paragraphs.
    """
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _SENTENCE_END_RE.finditer(text):
        if _is_false_stop(text, start, match.start(), match.end()):
            continue
        spans.append((start, match.end()))
        start = match.end()
    spans.append((start, len(text)))
    return [trimmed for span in spans if (trimmed := _strip_span(text, *span))]


def _strip_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    piece = text[start:end]
    if not piece.strip():
        return None
    start += len(piece) - len(piece.lstrip())
    end -= len(piece) - len(piece.rstrip())
    return start, end


def char_columns(char: str) -> int:
    """The columns a character takes on a terminal: two for a wide (Chinese) one."""
    return 2 if unicodedata.east_asian_width(char) in "WF" else 1


def display_width(text: str) -> int:
    return sum(map(char_columns, text))


def split_sentences(text: str) -> list[str]:
    return [text[start:end] for start, end in sentence_spans(text)]


@cache
def _jieba() -> Any:
    """jieba, imported and initialised once (it locks itself); its loading log is silenced."""
    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba


def _words(text: str) -> Iterator[str]:
    for match in _WORD_RE.finditer(text.lower().replace("’", "'")):
        if match.group("latin"):
            yield match.group("latin")
            continue
        for word in _jieba().cut(match.group("cjk")):
            if word.strip():
                yield word


def chinese_words(text: str) -> list[str]:
    """The text as jieba segments it, every word kept (punctuation and Latin words too)."""
    return [word for word in _jieba().lcut(text) if word.strip()]


def tagged_chinese_words(text: str) -> list[tuple[str, str]]:
    """The text as jieba segments it, each word with its part-of-speech tag ("n" a noun,
    "vn" a verbal noun, "v" a verb …); punctuation and spaces left out."""
    _jieba()
    import jieba.posseg

    return [(pair.word, pair.flag) for pair in jieba.posseg.cut(text) if pair.word.strip()]


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens for BM25: latin words, numbers and jieba's Chinese words."""
    return [word for word in _words(text) if word not in STOPWORDS]


def count_tokens(text: str) -> int:
    """A length measure in words (stopwords included, punctuation not)."""
    return sum(1 for _ in _words(text))
