"""Typed records passed between the pipeline's stages.

corpus (GameInfo) -> ingest (Document) -> chunking (Chunk; an added book's IngestReport)
-> retrieval (Hit)
-> answering: candidate sentences -> Quotes -> selection -> conclusion -> Checks
-> Answer (with Citations).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

Lang = Literal["en", "zh"]
LANGS: tuple[Lang, ...] = ("en", "zh")
Precision = Literal["float32", "bfloat16", "int8"]  # an embedder's weights
ChunkKind = Literal["section", "glossary"]
# What can look wrong in an added rulebook's text (rag.reading.report says how it is judged).
IngestProblem = Literal["little_text", "one_section", "symbols", "encoding"]


@dataclass(frozen=True)
class GameInfo:
    """One rulebook of the corpus, as its manifest describes it."""

    slug: str
    title: str
    aliases: tuple[str, ...]
    language: Lang
    source: str
    path: Path  # the rulebook file
    builtin: bool = True  # False for rulebooks a user added with `rules add`

    def names(self) -> tuple[str, ...]:
        """Every name a player may use for the game: title, slug and aliases."""
        return (self.title, self.slug, *self.aliases)


@dataclass(frozen=True)
class GameSummary:
    """A game as `rules games` lists it: its rulebook and how many passages it has."""

    game: GameInfo
    chunks: int


@dataclass(frozen=True)
class PageSpan:
    """Characters [start, end) of a Document's text came from this page (1-based)."""

    start: int
    end: int
    page: int


@dataclass(frozen=True)
class Document:
    """A rulebook flattened to text, page chrome removed."""

    game: str  # slug
    text: str
    source: str  # file path or description
    pages: tuple[PageSpan, ...] = ()  # empty for formats without pages
    # The source marks its headings (Markdown, HTML, a PDF's fonts): no others are guessed.
    headings_marked: bool = False
    # (file name, encoding) of each file read in another encoding than UTF-8: "GB18030".
    encodings: tuple[tuple[str, str], ...] = ()

    def page_at(self, offset: int) -> int | None:
        for span in self.pages:
            if span.start <= offset < span.end:
                return span.page
        return None


@dataclass(frozen=True)
class Chunk:
    """A retrievable passage: one section (or part of a long one) or one glossary entry."""

    id: str  # stable: derived from game, section path and text
    game: str  # slug
    section: tuple[str, ...]  # e.g. ("Maximum Apocalypse", "Playing the Game", "Move")
    text: str
    lang: Lang
    start: int  # character offsets into the Document text
    end: int
    page: int | None = None
    kind: ChunkKind = "section"

    @property
    def section_path(self) -> str:
        return " › ".join(self.section)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["section"] = list(self.section)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Chunk:
        return cls(**{**data, "section": tuple(data["section"])})


@dataclass(frozen=True)
class IngestWarning:
    problem: IngestProblem
    message: str  # what looks wrong and what to do about it


@dataclass(frozen=True)
class IngestReport:
    """What was read from a rulebook, with warnings when the reading looks wrong."""

    game: str  # slug
    pages: int | None  # None for formats without pages
    sections: int
    sentences: int
    passages: int
    words: int  # Latin words and numbers, and Chinese words as jieba cuts them
    characters: int  # Chinese characters: how a Chinese text's length is told
    language: Lang
    warnings: tuple[IngestWarning, ...] = ()


@dataclass(frozen=True)
class Hit:
    """A chunk found for a question, with its fused score and where it came from."""

    chunk: Chunk
    score: float
    rank: int  # 1-based, after fusion (and rerank)
    dense_score: float | None = None
    lexical_score: float | None = None


@dataclass(frozen=True)
class Citation:
    n: int  # the [n] marker in the answer
    chunk_id: str
    game: str
    section: str  # section path, " › " joined
    text: str


@dataclass(frozen=True)
class Quote:
    """A rulebook sentence shown verbatim: an exact substring of its passage."""

    n: int  # the citation marker of its passage
    chunk_id: str
    game: str
    section: str  # section path, " › " joined
    page: int | None
    text: str
    rendering: str | None = None  # the asker's language, when it is not the rulebook's
    rendering_withheld: bool = False  # one was made, but failed the checks
    deciding: bool = False  # the sentence judged to settle the question, shown first
    # With no rendering shown: the sentence's terms and rule words as the book's glossary
    # renders them, in its order (no model wrote it, and it is no translation).
    word_by_word: str | None = None

    @property
    def label(self) -> str:
        """The section's own name (the last part of its path), as a quote is labelled."""
        return self.section.rsplit(" › ", 1)[-1]

    def to_json(self) -> dict[str, Any]:
        """The quote as `rules ask --json`, the API and its stream name its fields."""
        return {_QUOTE_JSON.get(name, name): value for name, value in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Quote:
        fields_of = {json_name: name for name, json_name in _QUOTE_JSON.items()}
        return cls(**{fields_of.get(name, name): value for name, value in data.items()})


# A rendering is a `translation` in the JSON contract: tools parse these names, so they stay.
_QUOTE_JSON = {"rendering": "translation", "rendering_withheld": "translation_withheld"}


@dataclass(frozen=True)
class Check:
    """One check an answer went through before its conclusion was shown."""

    # quotes, selection, rendering, markers, numbers, negation, answer_word, language,
    # conclusion;
    # relevance when retrieval found nothing close enough to answer from
    name: str
    passed: bool
    detail: str = ""


@dataclass
class Timings:
    retrieve_s: float = 0.0
    generate_s: float = 0.0
    total_s: float = 0.0


@dataclass
class Answer:
    """The assembled answer; `to_json()` is the public `rules ask --json` contract."""

    question: str
    game: str | None
    lang: Lang
    answer: str
    abstained: bool
    citations: list[Citation]
    passages: list[Hit]
    timings: Timings = field(default_factory=Timings)
    backend: str = ""  # which generator answered, e.g. "llama:qwen2.5-1.5b" or "extractive"
    conclusion: str | None = None  # the checked conclusion shown, None when withheld
    quotes: list[Quote] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    # The chance that the deciding sentence (the quote marked so) settles the question.
    confidence: float | None = None
    # The earlier question of the conversation this one was read as following up (searched
    # and answered beside it); None for a question taken as a new topic.
    follows_up: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "game": self.game,
            "lang": self.lang,
            "answer": self.answer,
            "abstained": self.abstained,
            "citations": [asdict(c) for c in self.citations],
            "passages": [
                {
                    "rank": h.rank,
                    "chunk_id": h.chunk.id,
                    "game": h.chunk.game,
                    "section": h.chunk.section_path,
                    "text": h.chunk.text,
                    "score": round(h.score, 6),
                }
                for h in self.passages
            ],
            "timings": {
                "retrieve_s": round(self.timings.retrieve_s, 4),
                "generate_s": round(self.timings.generate_s, 4),
                "total_s": round(self.timings.total_s, 4),
            },
            "backend": self.backend,
            "conclusion": self.conclusion,
            "quotes": [q.to_json() for q in self.quotes],
            "checks": [asdict(c) for c in self.checks],
            "confidence": None if self.confidence is None else round(self.confidence, 4),
            "follows_up": self.follows_up,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Answer:
        """The answer `to_json()` printed (e.g. received from the API), so that it can be
        shown and printed again the same way. A passage's language and offsets are not in
        the contract: its chunk gets the answer's language and offsets spanning its text."""
        passages = [
            Hit(
                Chunk(
                    id=p["chunk_id"],
                    game=p["game"],
                    section=tuple(p["section"].split(" › ")),
                    text=p["text"],
                    lang=data["lang"],
                    start=0,
                    end=len(p["text"]),
                ),
                score=p["score"],
                rank=p["rank"],
            )
            for p in data["passages"]
        ]
        return cls(
            question=data["question"],
            game=data["game"],
            lang=data["lang"],
            answer=data["answer"],
            abstained=data["abstained"],
            citations=[Citation(**c) for c in data["citations"]],
            passages=passages,
            # The API's timings add queue and load time, which the CLI's contract has not.
            timings=Timings(**{f.name: data["timings"][f.name] for f in fields(Timings)}),
            backend=data["backend"],
            conclusion=data["conclusion"],
            quotes=[Quote.from_json(q) for q in data["quotes"]],
            checks=[Check(**c) for c in data["checks"]],
            confidence=data.get("confidence"),
            follows_up=data.get("follows_up"),
        )


@dataclass(frozen=True)
class Turn:
    """One earlier exchange of a conversation, so follow-ups keep game and topic."""

    question: str
    answer: str
    game: str | None


@dataclass(frozen=True)
class StreamEvent:
    """What `Pipeline.ask_stream` yields: the rule text, the conclusion as it is written,
    then the final Answer.

    kind "quotes": `quotes` holds the verified rule text (and `text` shows it, in the
    asker's language), sent as soon as retrieval is done and before any LLM token; a later
    one replaces it when the LLM's selection narrows it. kind "token": `text` holds the
    next piece of the conclusion, a draft until it is checked (the final answer is
    authoritative). kind "answer":
    `answer` is the assembled Answer.
    """

    kind: Literal["quotes", "token", "answer"]
    text: str = ""
    answer: Answer | None = None
    quotes: tuple[Quote, ...] = ()


def final_answer(events: Iterable[StreamEvent]) -> Answer:
    """The Answer an event stream ends with (the events before it are only its preview)."""
    final: Answer | None = None
    for event in events:
        final = event.answer or final
    if final is None:
        raise RuntimeError("the answer's event stream ended without the answer")
    return final
