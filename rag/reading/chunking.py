"""Section-aware chunking of a flattened rulebook.

Headings come in five shapes: '#' lines (levels stated by ingest), Chinese numbered
headings ("第一章 基本规则", "一、总则", "（一）摸牌", "1.1 出牌": rag.reading.numbering),
numbered steps ("3. Player Actions", "1: Spawn Monsters", "1、摸牌"), ALL-CAPS short lines
("PLAYER ACTIONS") and Title-case short lines ("Playing the Game", "Stealth test"). Their
nesting is inferred:

- '#' headings sit at their stated level;
- a Chinese numbered heading closes the open ones of its rank or a deeper one (第…章 holds
  一、, which holds （一）, then steps, then 1.1) and nests under the rest;
- a heading directly followed by another heading is a parent of what follows, until a
  later parent or a '#' heading closes it. When both have the same shape (two ALL-CAPS
  lines), nothing in flattened text tells how far the parent reaches, so it holds only the
  heading after it and later ones that repeat an earlier title (a "Quick Reference"
  restating "Setup"): a book does not name two sections alike side by side;
- a title repeated right after a heading without text, naming the section just before
  it, is a leftover of the page layout and is dropped: its text belongs to that heading;
- numbered steps nest under the enclosing '#' or parent heading; a step continuing the
  open list (n after n-1) returns to that list even after a '#' heading in between;
- a plain heading after a step nests under the step when the list continues later,
  otherwise it closes the list and nests under the list's owner.

Inside a section, a paragraph opening with a short title phrase and then a sentence
("Stealth test Roll the two Spawn dice…", "High Score. When…") starts a sub-section named
by the phrase. In glossary-like sections (named so, or with three entries in a row) each
"Term: text" / "TERM - text" line is a glossary chunk titled by its term; paragraphs
between two entries continue the earlier one.

Each chunk's text is exactly `doc.text[start:end]`: its body lines, without the heading
lines (the section path carries them). Long sections split at paragraph, then sentence
boundaries, repeating up to `overlap_chars` of whole sentences. A passage cites one page, so
a section going on over a page break goes on in a new passage (two steps of Time Bomb's
setup, with a player-count table each, on pages 8 and 9).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from rag.lang import CJK_RE, STOPWORDS, detect_lang, sentence_spans
from rag.reading.numbering import STEP_RANK, numbered_rank
from rag.types import Chunk, ChunkKind, Document, GameInfo

CHUNKER_VERSION = "9"  # 8: Chinese numbered headings ranked; 9: quoted stops kept

_TERMINAL = (".", "!", "?", ")", '"', "”", "。", "！", "？", "）")
_MAX_HEADING_CHARS = 60
_MAX_HEADING_WORDS = 8
_MIN_GLOSSARY_RUN = 3

_MD_RE = re.compile(r"^(#{1,6})\s+(.+)$")
_STEP_RE = re.compile(r"^(\d{1,2})(?:[.:)、．]|\s[-–])\s*(\S.*)$")
_CALLOUT_RE = re.compile(r"^[A-Z]\.\s")  # "A. Card Type": labels of a picture's parts
_CJK_SENTENCE_MARKS = re.compile(r"[。，；！？：]")
_MINOR_WORD_LIST = "a an the and or of to in on for with vs vs. at by from your & / -"
_MINOR_WORDS = frozenset(_MINOR_WORD_LIST.split())
_ENTRY_RE = re.compile(
    r"^(?:- )?(?P<term>[^\s:：][^:：]{0,40}?)\s*(?:[:：]|\s[-–—]\s)\s*(?P<body>\S.*)$"
)
_CAPS_ENTRY_RE = re.compile(r"^(?:- )?(?P<term>[A-Z][A-Z0-9&'’/ -]*[A-Z0-9])\s+(?P<body>[a-z].*)$")
_NOTE_TERM_LIST = "note example remember reminder tip important exception 注意 例如"
_NOTE_TERMS = frozenset(_NOTE_TERM_LIST.split())
_GLOSSARY_NAME_RE = re.compile(
    r"glossary|\bicons?\b|keywords?|\bterms\b|terminology|definitions|symbols|术语|图标|关键词",
    re.IGNORECASE,
)
_LABEL_RE = re.compile(r"^[^:：]{1,40}[:：]\s*\S")  # "Original Artwork: Gustav Rangmar"
_RUN_IN_PERIOD_RE = re.compile(r"^([A-Z][\w'’-]+(?: [A-Z][\w'’-]*){0,3})\. (?=[A-Z])")
_GAME_TITLE_SUFFIXES = ("", "rulebook", "rules")


@dataclass(frozen=True)
class _Para:
    """One line of the document: a paragraph, heading or list item."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class _Heading:
    title: str
    md_level: int = 0  # from '#' marks; 0 when the level is inferred
    number: int | None = None  # a numbered step's number
    rank: int | None = None  # a Chinese numbered heading's rank (rag.reading.numbering)


# ---------------------------------------------------------------- line shapes


def _word_core(word: str) -> str:
    return word.strip("()[]\"'“”‘’,.;:!?").lower()


def _has_function_words(words: list[str]) -> bool:
    return any(_word_core(w) in STOPWORDS for w in words)


def _is_title_case(words: list[str]) -> bool:
    def capitalised(word: str) -> bool:
        core = word.lstrip("(\"'“‘")
        return not core or core[0].isupper() or core[0].isdigit() or not core[0].isalnum()

    return all(capitalised(w) or w.lower() in _MINOR_WORDS for w in words)


def _is_all_caps(text: str) -> bool:
    letters = [c for c in text if c.isalpha()]
    return len(letters) >= 2 and all(c.isupper() for c in letters)


def _is_cjk_heading(text: str) -> bool:
    """A short Chinese line without sentence punctuation: "游戏准备", "一、回合流程"."""
    chars = text.replace(" ", "")
    cjk = len(CJK_RE.findall(chars))
    return 0 < len(chars) <= 20 and cjk * 2 >= len(chars) and not _CJK_SENTENCE_MARKS.search(text)


def _is_heading_phrase(text: str) -> bool:
    """Title-case, ALL-CAPS or short sentence-case phrase ("Stealth test")."""
    words = text.split()
    if not words or len(words) > _MAX_HEADING_WORDS:
        return False
    if _is_cjk_heading(text):
        return True
    if not words[0].lstrip("(\"'“‘")[:1].isupper():
        return False
    short_phrase = len(words) <= 3 and not _has_function_words(words)
    return _is_all_caps(text) or _is_title_case(words) or short_phrase


def _entry_term(text: str) -> str | None:
    """The term of a glossary-shaped line ("Stun: A stunned…", "DODGE - This…")."""
    for pattern in (_ENTRY_RE, _CAPS_ENTRY_RE):
        match = pattern.match(text)
        if match and match.group("body").endswith(_TERMINAL):
            term = match.group("term").strip()
            if _is_term(term, caps=pattern is _CAPS_ENTRY_RE):
                return term
    return None


def _is_term(term: str, *, caps: bool) -> bool:
    words = term.split()
    if term.casefold() in _NOTE_TERMS or not 1 <= len(words) <= 5:
        return False
    if CJK_RE.match(term):
        return len(term) <= 8
    if caps and not _is_all_caps(term):
        return False
    return term[0].isupper() and len(term) >= 2 and not _has_function_words(words)


def _heading(text: str, *, marked_only: bool = False) -> _Heading | None:
    """The heading a line is, if it is one; glossary entries and list items are not."""
    if md := _MD_RE.match(text):
        title = md.group(2).strip()
        step = _STEP_RE.match(title)
        return _Heading(title, len(md.group(1)), int(step.group(1)) if step else None)
    if (
        marked_only
        or len(text) > _MAX_HEADING_CHARS
        or _is_bullet(text)
        or _CALLOUT_RE.match(text)
        or text.endswith((".", ",", ";", "!", "。", "，", "；", "！"))
        or _entry_term(text)
    ):
        return None
    if (rank := numbered_rank(text)) is not None:
        return _Heading(text.rstrip(":：").strip(), rank=rank)
    if step := _STEP_RE.match(text):
        return _Heading(text, number=int(step.group(1))) if _is_step_title(step.group(2)) else None
    title = text.rstrip(":：").strip()
    return _Heading(title) if _is_heading_phrase(title) else None


def _is_step_title(text: str) -> bool:
    """The words after a step's number: "Spawn Monsters", "Draw a card from your deck"."""
    first = text[:1]
    return (first.isupper() or bool(CJK_RE.match(first))) and len(text.split()) <= 8


def _run_in_title(text: str) -> str | None:
    """The title phrase a paragraph opens with ("Stealth test Roll the two…"), if any."""
    if not text.endswith(_TERMINAL):
        return None
    if (match := _RUN_IN_PERIOD_RE.match(text)) and _is_plain_phrase(match.group(1).split()):
        return match.group(1)
    words = text.split()
    # Longest phrase first: "Instant Actions When…" must not stop at "Instant".
    for size in range(min(5, len(words) - 4), 1, -1):
        phrase, rest = words[:size], words[size:]
        if rest[0][0].isupper() and _is_plain_phrase(phrase):
            return " ".join(phrase)
    return None


def _is_plain_phrase(words: list[str]) -> bool:
    """Capitalised words free of punctuation and function words: a name, not a clause."""
    return (
        words[0][0].isupper()
        and all(re.fullmatch(r"[A-Za-z][A-Za-z'’-]*", w) for w in words)
        and not _has_function_words(words)
        and len(" ".join(words)) <= 40
    )


def _is_bullet(text: str) -> bool:
    return text.startswith(("- ", "* "))


def _is_game_title(title: str, game: GameInfo) -> bool:
    """Lines naming the book itself ("Maximum Apocalypse Rulebook") are not sections."""

    def squash(text: str) -> str:
        return re.sub(r"\W+", "", text.casefold())

    name = squash(game.title)
    return any(squash(title) == name + suffix for suffix in _GAME_TITLE_SUFFIXES)


# ---------------------------------------------------------------- outline

_FrameKind = Literal["md", "numbered", "parent", "minor", "step"]
_Shape = Literal["md", "numbered", "step", "caps", "title", "phrase"]


def _shape(heading: _Heading) -> _Shape:
    if heading.md_level:
        return "md"
    if heading.rank is not None:
        return "numbered"
    if heading.number is not None:
        return "step"
    if _is_all_caps(heading.title):
        return "caps"
    return "title" if _is_title_case(heading.title.split()) else "phrase"


@dataclass(frozen=True)
class _Frame:
    title: str
    level: int
    kind: _FrameKind
    open_list: bool = False  # a step whose list continues with a later step
    reach_unknown: bool = False  # a parent followed by a heading of its own shape
    rank: int = 0  # a numbered heading's rank


class _Outline:
    """The stack of open headings; decides where each new heading nests."""

    def __init__(self) -> None:
        self.stack: list[_Frame] = []
        self.fresh = False  # the last line was a heading, so a next heading nests under it
        self._list_owner: list[_Frame] = []
        self._list_last: int | None = None
        self._titles: set[str] = set()

    def add(
        self, heading: _Heading, *, is_parent: bool, has_next: bool, reach_unknown: bool = False
    ) -> tuple[str, ...]:
        # A parent of unknown reach holds its first heading (and what that holds) and
        # repeated titles; any other heading that would be its next child closes it.
        repeat = heading.title.casefold() in self._titles
        self._titles.add(heading.title.casefold())
        closes_unknown_reach = not self.fresh and not repeat
        if heading.number is not None:
            self._add_step(heading.title, heading.number, has_next, closes_unknown_reach)
        elif heading.rank is not None:
            # Its rank says how far it reaches: no guess from what follows it.
            rank = heading.rank
            self._pop(
                lambda f: (
                    f.kind == "minor"
                    or (f.kind == "numbered" and f.rank >= rank)
                    or (f.kind == "step" and rank < STEP_RANK)
                    or (closes_unknown_reach and f.reach_unknown)
                )
            )
            self._push(heading.title, "numbered", rank=rank)
        elif heading.md_level:
            self._pop(lambda f: f.level >= heading.md_level)
            self._push(heading.title, "md", level=heading.md_level)
        else:
            # Right after a heading, nest under it, unless it is the last step of a list.
            closes = set() if self.fresh else {"minor", "parent"} if is_parent else {"minor"}
            self._pop(
                lambda f: (
                    f.kind in closes
                    or (f.kind == "step" and not f.open_list)
                    or (closes_unknown_reach and f.reach_unknown)
                )
            )
            kind: _FrameKind = "parent" if is_parent else "minor"
            self._push(heading.title, kind, reach_unknown=reach_unknown)
        self.fresh = True
        return tuple(frame.title for frame in self.stack)

    def _add_step(
        self, title: str, number: int, has_next: bool, closes_unknown_reach: bool
    ) -> None:
        if self._list_last is not None and number == self._list_last + 1:
            self.stack = list(self._list_owner)
        else:
            self._pop(
                lambda f: (
                    f.kind in ("minor", "step")
                    or (f.kind == "numbered" and f.rank > STEP_RANK)
                    or (closes_unknown_reach and f.reach_unknown)
                )
            )
            self._list_owner = list(self.stack)
        self._list_last = number
        self._push(title, "step", open_list=has_next)

    def _pop(self, closes: Callable[[_Frame], bool]) -> None:
        while self.stack and closes(self.stack[-1]):
            self.stack.pop()

    def _push(
        self,
        title: str,
        kind: _FrameKind,
        *,
        level: int = 0,
        open_list: bool = False,
        reach_unknown: bool = False,
        rank: int = 0,
    ) -> None:
        level = level or (self.stack[-1].level + 1 if self.stack else 1)
        self.stack.append(_Frame(title, level, kind, open_list, reach_unknown, rank))


# ---------------------------------------------------------------- sections


@dataclass(frozen=True)
class _Segment:
    """Consecutive paragraphs that share a section path and a chunk kind."""

    path: tuple[str, ...]
    kind: ChunkKind
    paras: list[_Para]


def _paragraphs(text: str) -> list[_Para]:
    paras: list[_Para] = []
    offset = 0
    for line in text.split("\n"):
        if stripped := line.strip():
            start = offset + len(line) - len(line.lstrip())
            paras.append(_Para(start, start + len(stripped), stripped))
        offset += len(line) + 1
    return paras


def _demote_label_rows(paras: list[_Para], headings: list[_Heading | None]) -> None:
    """Rows of "Label: value" lines are a table (credits), not headings ("Mission 0: X")."""
    labels = [bool(_LABEL_RE.match(p.text)) for p in paras]
    for i, heading in enumerate(headings):
        neighbours = labels[max(i - 1, 0) : i] + labels[i + 1 : i + 2]
        if heading and not heading.md_level and labels[i] and any(neighbours):
            headings[i] = None


def _layout_leftovers(headings: list[_Heading | None]) -> set[int]:
    """Headings repeating, right after a heading without text, the title of the section
    before that one ("SPECIAL RULES & ACTIONS", "MOVEMENT", "SPECIAL RULES & ACTIONS")."""
    leftovers: set[int] = set()
    last_with_text: str | None = None
    for i, heading in enumerate(headings):
        if heading is None:
            continue
        if i > 0 and headings[i - 1] is not None and heading.title == last_with_text:
            leftovers.add(i)
        elif i + 1 < len(headings) and headings[i + 1] is None:
            last_with_text = heading.title
    return leftovers


def _step_continues(headings: list[_Heading | None]) -> dict[int, bool]:
    """For each numbered step but the last: does the next numbered step continue its list?"""
    steps = [(i, h.number) for i, h in enumerate(headings) if h and h.number is not None]
    return {i: later == number + 1 for (i, number), (_, later) in pairwise(steps)}


def _sections(doc: Document, game: GameInfo) -> list[_Segment]:
    """The document cut at its headings: each section's path and body paragraphs, in order."""
    paras = _paragraphs(doc.text)
    headings = [_heading(p.text, marked_only=doc.headings_marked) for p in paras]
    _demote_label_rows(paras, headings)
    leftovers = _layout_leftovers(headings)
    paras = [p for i, p in enumerate(paras) if i not in leftovers]
    headings = [h for i, h in enumerate(headings) if i not in leftovers]
    continues = _step_continues(headings)
    outline = _Outline()
    sections = [_Segment((game.title,), "section", [])]
    for i, (para, heading) in enumerate(zip(paras, headings, strict=True)):
        if heading is None:
            sections[-1].paras.append(para)
            outline.fresh = False
        elif not _is_game_title(heading.title, game):
            child = headings[i + 1] if i + 1 < len(headings) else None
            path = outline.add(
                heading,
                is_parent=child is not None,
                has_next=continues.get(i, False),
                reach_unknown=child is not None and _shape(child) == _shape(heading),
            )
            sections.append(_Segment((game.title, *path), "section", []))
    return [s for s in sections if s.paras]


def _is_glossary(name: str, terms: list[str | None]) -> bool:
    run = longest = 0
    for term in terms:
        run = run + 1 if term else 0
        longest = max(longest, run)
    return longest >= _MIN_GLOSSARY_RUN or bool(_GLOSSARY_NAME_RE.search(name))


def _segments(section: _Segment) -> list[_Segment]:
    """Split a section's body into run-in sub-sections and glossary entries."""
    terms = [_entry_term(p.text) for p in section.paras]
    glossary = _is_glossary(section.path[-1], terms)
    last_entry = max((i for i, t in enumerate(terms) if t), default=-1) if glossary else -1
    segments = [_Segment(section.path, "section", [])]
    for i, (para, term) in enumerate(zip(section.paras, terms, strict=True)):
        current = segments[-1]
        if glossary and term:
            segments.append(_Segment((*section.path, term), "glossary", [para]))
        elif current.kind == "glossary" and i < last_entry and not _is_bullet(para.text):
            current.paras.append(para)  # more about the entry: another one follows
        elif title := _run_in_title(para.text):
            segments.append(_Segment((*section.path, title), "section", [para]))
        elif current.kind == "glossary":
            segments.append(_Segment(section.path, "section", [para]))
        else:
            current.paras.append(para)
    return [s for s in segments if s.paras]


# ---------------------------------------------------------------- splitting


def _hard_split(text: str, start: int, end: int, max_chars: int) -> list[tuple[int, int]]:
    """Cut an over-long sentence at the last space before the limit (anywhere for CJK)."""
    pieces: list[tuple[int, int]] = []
    while end - start > max_chars:
        cut = text.rfind(" ", start + 1, start + max_chars)
        cut = cut if cut > start else start + max_chars
        pieces.append((start, cut))
        start = cut
        while text[start].isspace():
            start += 1
    pieces.append((start, end))
    return pieces


def _units(text: str, para: _Para, max_chars: int) -> list[tuple[int, int]]:
    """A paragraph, or its sentences when it is longer than a chunk."""
    if para.end - para.start <= max_chars:
        return [(para.start, para.end)]
    return [
        piece
        for s, e in sentence_spans(para.text)
        for piece in _hard_split(text, para.start + s, para.start + e, max_chars)
    ]


def _overlap_start(text: str, start: int, end: int, earliest: int, overlap: int) -> int | None:
    """Where the next window may begin inside [start, end): whole trailing sentences."""
    starts = [start + s for s, _ in sentence_spans(text[start:end])]
    fitting = [s for s in starts if s > start and s >= earliest and end - s <= overlap]
    return min(fitting, default=None)


def _windows(
    doc: Document, paras: list[_Para], max_chars: int, overlap: int
) -> list[tuple[int, int]]:
    text = doc.text
    units = [unit for para in paras for unit in _units(text, para, max_chars)]
    windows: list[tuple[int, int]] = []
    start, end = units[0]
    for unit_start, unit_end in units[1:]:
        if doc.page_at(unit_start) != doc.page_at(start):
            windows.append((start, end))
            start = unit_start
        elif unit_end - start > max_chars:
            windows.append((start, end))
            overlap_at = _overlap_start(text, start, end, unit_end - max_chars, overlap)
            start = unit_start if overlap_at is None else overlap_at
        end = unit_end
    windows.append((start, end))
    return windows


# ---------------------------------------------------------------- chunks


def _chunk_id(slug: str, path: tuple[str, ...], text: str, seen: Counter[str]) -> str:
    digest = hashlib.sha1("\x1f".join((*path, text)).encode("utf-8")).hexdigest()[:10]
    chunk_id = f"{slug}:{digest}"
    seen[chunk_id] += 1
    # Same path and same text twice: number the repeats, still stable across runs.
    return chunk_id if seen[chunk_id] == 1 else f"{chunk_id}-{seen[chunk_id]}"


def chunk_document(
    doc: Document, game: GameInfo, *, max_chars: int = 1200, overlap_chars: int = 150
) -> list[Chunk]:
    """The document's retrievable chunks, in document order."""
    if doc.game != game.slug:
        raise ValueError(f"Document of {doc.game!r} chunked as {game.slug!r}.")
    if max_chars < 1 or not 0 <= overlap_chars < max_chars:
        raise ValueError("Need max_chars >= 1 and 0 <= overlap_chars < max_chars.")
    seen: Counter[str] = Counter()
    chunks: list[Chunk] = []
    for section in _sections(doc, game):
        for segment in _segments(section):
            for start, end in _windows(doc, segment.paras, max_chars, overlap_chars):
                text = doc.text[start:end]
                chunks.append(
                    Chunk(
                        id=_chunk_id(game.slug, segment.path, text, seen),
                        game=game.slug,
                        section=segment.path,
                        text=text,
                        lang=detect_lang(text),
                        start=start,
                        end=end,
                        page=doc.page_at(start),
                        kind=segment.kind,
                    )
                )
    return chunks
