"""Request and response schemas: what the OpenAPI document shows, with examples.

Requests and responses are separate models. `AskResponse` mirrors `Answer.to_json()`, the
public `rules ask --json` contract, plus the conversation id; `QuotesEvent` is the rule text
`/v1/ask/stream` sends before the conclusion is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rag.settings import MAX_QUESTION_CHARS
from rag.types import Answer, StreamEvent

if TYPE_CHECKING:
    from api.waiting import Waited

CONVERSATION_ID = r"^[A-Za-z0-9_-]{8,64}$"
MAX_HISTORY = 20
# The most passages one request may ask for: the API's own bound, below the settings' MAX_K,
# as what a request costs the shared server grows with them.
MAX_REQUEST_K = 20

# --- errors ---------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    type: str = Field(description="Stable machine-readable kind, e.g. `game_not_found`.")
    message: str = Field(description="What went wrong and what to do, for people.")
    games: list[str] | None = Field(None, description="The known games, when none matched.")
    retry_after_s: int | None = Field(
        None, description="429 and 503: seconds to wait before retrying (as `Retry-After`)."
    )


class ErrorResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "type": "game_not_found",
                        "message": "Unknown game 'chess'. Known games: suros, deck52-final-bus.",
                        "games": ["suros", "deck52-final-bus"],
                    }
                }
            ]
        }
    )
    error: ErrorDetail


class OpenAIErrorDetail(BaseModel):
    message: str = Field(description="What went wrong and what to do, for people.")
    type: str = Field(
        description="OpenAI's category: `invalid_request_error`, `authentication_error`, "
        "`permission_error`, `rate_limit_error` or `server_error`."
    )
    param: str | None = Field(description="The request field at fault, if one is.")
    code: str = Field(description="Stable machine-readable kind, e.g. `model_not_found`.")
    games: list[str] | None = Field(None, description="The known games, when none matched.")


class OpenAIErrorResponse(BaseModel):
    """Errors of the OpenAI-compatible routes, in OpenAI's shape."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "message": "The model 'gpt-4o' does not exist here: use `rulekeeper` "
                        "or a game's id from /v1/models.",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                }
            ]
        }
    )
    error: OpenAIErrorDetail


# --- ask ------------------------------------------------------------------------------------


class HistoryTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str = Field(max_length=MAX_QUESTION_CHARS, description="An earlier question.")
    answer: str = Field(max_length=20_000, description="The answer it got.")
    game: str | None = Field(None, max_length=200, description="Its game, if known.")


class AskRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "not": {"required": ["conversation_id", "history"]},
            "examples": [
                {"question": "How many cards does each player draw?", "game": "suros"},
                {
                    "question": "And if the deck runs out?",
                    "conversation_id": "c_7Qm2xY9kLp3Z",
                },
            ],
        },
    )
    question: str = Field(
        min_length=1,
        max_length=MAX_QUESTION_CHARS,
        description="The player's question. The server's `max_question_chars` also applies.",
    )
    game: str | None = Field(
        None,
        max_length=200,
        description="Game title, slug or alias; omitted: detected from the question or the "
        "conversation.",
    )
    k: int | None = Field(None, ge=1, le=MAX_REQUEST_K, description="Passages to retrieve.")
    conversation_id: str | None = Field(
        None,
        pattern=CONVERSATION_ID,
        description="Continue this conversation (the server keeps its recent turns). An "
        "unknown or expired id starts a new conversation under that id. Omitted (and no "
        "`history`): the server starts one and returns its id.",
    )
    history: list[HistoryTurn] | None = Field(
        None,
        max_length=MAX_HISTORY,
        description="Earlier turns, oldest first, for clients that keep the conversation "
        "themselves; not with `conversation_id`.",
    )

    @model_validator(mode="after")
    def _one_memory(self) -> AskRequest:
        if {"conversation_id", "history"} <= self.model_fields_set:
            raise ValueError("give conversation_id or history, not both")
        return self


# The answer's parts reject keys they do not declare, so that a key added to
# `Answer.to_json()` fails every answer until it is declared here, with its description.
_CONTRACT = ConfigDict(extra="forbid")


class CitationOut(BaseModel):
    model_config = _CONTRACT
    n: int = Field(description="The `[n]` marker in the answer.")
    chunk_id: str
    game: str
    section: str = Field(description="Section path, ` › ` joined.")
    text: str


class QuoteOut(BaseModel):
    model_config = _CONTRACT
    n: int = Field(description="The `[n]` marker of the quote's passage (its citation).")
    chunk_id: str
    game: str
    section: str = Field(description="Section path, ` › ` joined.")
    page: int | None = Field(description="Rulebook page, for formats with pages.")
    text: str = Field(description="The rulebook sentence, verbatim.")
    # `translation` and `translation_withheld` name the quote's rendering (Quote.rendering)
    # as the contract always has: tools parse these names.
    translation: str | None = Field(
        description="The sentence rendered by the model in the asker's language, when it is "
        "not the rulebook's and the rendering passed the checks."
    )
    translation_withheld: bool = Field(
        False,
        description="A rendering was made but failed the checks, so none is shown: the rule "
        "text says so in its place.",
    )
    deciding: bool = Field(
        False,
        description="The sentence judged to settle the question: shown first, under a "
        "heading of its own. At most one quote is.",
    )
    word_by_word: str | None = Field(
        None,
        description="With `translation_withheld`: the sentence's game terms and rule words as "
        "the rulebook's glossary renders them, in its order, `…` for the rest. No model wrote "
        "it, and it is no translation.",
    )


class CheckOut(BaseModel):
    model_config = _CONTRACT
    name: str = Field(
        description="What was checked: `quotes`, `selection`, `numbers`, `negation`, "
        "`markers`, `rendering`, `conclusion`, …"
    )
    passed: bool
    detail: str = Field(description="What the check found; may be empty.")


class PassageOut(BaseModel):
    model_config = _CONTRACT
    rank: int
    chunk_id: str
    game: str
    section: str
    text: str
    score: float


class TimingsOut(BaseModel):
    """Where a request's time went: total_s is queue_s + load_s + the pipeline's own time,
    which is retrieve_s + generate_s and the checks around them."""

    model_config = _CONTRACT

    retrieve_s: float
    generate_s: float
    total_s: float
    queue_s: float = Field(description="Waiting for the model (other questions first).")
    load_s: float = Field(description="Loading the index or models; 0 once warm.")


class AskResponse(BaseModel):
    """`Answer.to_json()` (the `rules ask --json` contract), validated, plus what the API
    adds: `conversation_id` and `rule_text_only`, and queue and load time in `timings`."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "question": "How many cards does each player draw?",
                    "game": "suros",
                    "lang": "en",
                    "answer": "Deciding rule: [1] Setup p. 4\n    “Each player draws two "
                    "cards.”\n\nConclusion: Each player draws two cards. [1]\n\nThis "
                    "answer is for reference only; where they differ, the rulebook prevails.",
                    "abstained": False,
                    "citations": [
                        {
                            "n": 1,
                            "chunk_id": "suros-0007",
                            "game": "suros",
                            "section": "Suros › Setup",
                            "text": "Each player draws two cards.",
                        }
                    ],
                    "passages": [
                        {
                            "rank": 1,
                            "chunk_id": "suros-0007",
                            "game": "suros",
                            "section": "Suros › Setup",
                            "text": "Each player draws two cards.",
                            "score": 0.032787,
                        }
                    ],
                    "timings": {
                        "retrieve_s": 0.012,
                        "generate_s": 0.003,
                        "total_s": 0.416,
                        "queue_s": 0.4,
                        "load_s": 0.0,
                    },
                    "backend": "llama:qwen2.5-1.5b",
                    "conclusion": "Each player draws two cards.",
                    "quotes": [
                        {
                            "n": 1,
                            "chunk_id": "suros-0007",
                            "game": "suros",
                            "section": "Suros › Setup",
                            "page": 4,
                            "text": "Each player draws two cards.",
                            "translation": None,
                            "translation_withheld": False,
                            "deciding": True,
                            "word_by_word": None,
                        }
                    ],
                    "checks": [
                        {"name": "quotes", "passed": True, "detail": "1 shown"},
                        {"name": "selection", "passed": True, "detail": "sentences [1]"},
                        {"name": "markers", "passed": True, "detail": ""},
                        {"name": "numbers", "passed": True, "detail": ""},
                        {"name": "negation", "passed": True, "detail": ""},
                    ],
                    "confidence": 0.71,
                    "conversation_id": "c_7Qm2xY9kLp3Z",
                    "follows_up": "How do I set up the game?",
                    "rule_text_only": False,
                }
            ]
        },
    )
    question: str
    game: str | None = Field(description="Slug of the game answered about.")
    lang: Literal["en", "zh"]
    answer: str = Field(
        description="The answer as shown: the deciding sentence with its section and page, "
        "the conclusion when one passed its checks, and the rest of the rule text; or, when "
        "`abstained`, that the rulebook does not say (above the nearest rule text, cited, "
        "when it only seems not to: no conclusion passed its checks and no sentence is "
        "close). Then a reminder. "
        "Every `[n]` marker refers to an entry of `citations`."
    )
    abstained: bool = Field(description="True when the rulebook does not cover the question.")
    citations: list[CitationOut]
    passages: list[PassageOut]
    timings: TimingsOut
    backend: str = Field(description="The generator that answered.")
    conclusion: str | None = Field(
        description="The checked conclusion shown in `answer`; null when none was written "
        "(no model, or the rulebook is silent) or it failed a check (see `checks`)."
    )
    quotes: list[QuoteOut] = Field(
        description="The rule text: rulebook sentences, verbatim, that the answer rests on."
    )
    checks: list[CheckOut] = Field(
        description="The checks the answer went through before its conclusion was shown."
    )
    confidence: float | None = Field(
        None,
        description="The chance, by a model fitted on gold sets, that the deciding sentence "
        "settles the question; null when no sentence was judged.",
    )
    conversation_id: str | None = Field(
        None, description="Pass it back to ask a follow-up; null when `history` was given."
    )
    follows_up: str | None = Field(
        None,
        description="The conversation's earlier question this one was read as following up "
        "(searched and answered beside it); null for a question taken as a new topic.",
    )
    rule_text_only: bool = Field(
        False,
        description="The model could not be had in time (its line full, a wait past "
        "`api.queue_timeout_s`, a conclusion past `api.timeout_s`), so the verified rule "
        "text alone answered, with a line saying so and a failed `load` check.",
    )

    @classmethod
    def of(cls, answer: Answer, conversation_id: str | None, waited: Waited) -> AskResponse:
        data = answer.to_json()
        outside = waited.queue_s + waited.load_s
        data["timings"] = {
            **data["timings"],
            "queue_s": round(waited.queue_s, 4),
            "load_s": round(waited.load_s, 4),
            "total_s": round(answer.timings.total_s + outside, 4),
        }
        return cls.model_validate(
            {**data, "conversation_id": conversation_id, "rule_text_only": waited.rule_text_only}
        )


class QuotesEvent(BaseModel):
    """The data of a `quotes` event of `/v1/ask/stream`: the rule text, before any token."""

    text: str = Field(description="The rule text rendered for display, in the asker's language.")
    quotes: list[QuoteOut] = Field(description="The same quotes, one by one.")

    @classmethod
    def of(cls, event: StreamEvent) -> QuotesEvent:
        return cls(
            text=event.text,
            quotes=[QuoteOut.model_validate(q.to_json()) for q in event.quotes],
        )


# --- games and the rulebook view ------------------------------------------------------------


class GameOut(BaseModel):
    slug: str
    title: str
    aliases: list[str]
    language: Literal["en", "zh"]
    builtin: bool = Field(description="False for rulebooks a user added.")
    chunks: int = Field(description="Passages indexed.")


class GameList(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "games": [
                        {
                            "slug": "suros",
                            "title": "Suros",
                            "aliases": [],
                            "language": "en",
                            "builtin": True,
                            "chunks": 42,
                        }
                    ]
                }
            ]
        }
    )
    games: list[GameOut]


class SectionOut(BaseModel):
    """A passage, or a whole section of the table of contents (several passages joined)."""

    id: str = Field(description="The passage's chunk id, as in citations (a section's first).")
    number: int = Field(description="Its section's number in the table of contents.")
    game: str
    section: list[str] = Field(description="Heading path, outermost first.")
    section_path: str = Field(description="The same, ` › ` joined.")
    page: int | None = Field(description="Rulebook page (the first), for formats with pages.")
    pages: list[int] = Field(description="Every page it spans; empty without pages.")
    chunk_ids: list[str] = Field(description="The passages it is made of, in reading order.")
    kind: Literal["section", "glossary"]
    text: str
    lang: Literal["en", "zh"] = Field(description="The passage's language.")
    start: int = Field(
        description="Where the passage starts in the rulebook's text (characters): pieces of "
        "a long section overlap, and these offsets tell a reader what to skip."
    )
    end: int = Field(description="Where it ends (exclusive).")


class SectionList(BaseModel):
    game: str = Field(description="The game's slug.")
    title: str
    sections: list[SectionOut] = Field(description="The rulebook's passages in reading order.")


class HighlightOut(BaseModel):
    """One line of a quote on its page, as fractions (0 to 1) of the page's width and height
    from its top left: place it over the image at any size."""

    x0: float
    top: float
    x1: float
    bottom: float


class PageOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "game": "time-bomb",
                    "title": "Time Bomb",
                    "page": 8,
                    "pages": 12,
                    "width": 255.12,
                    "height": 396.84,
                    "highlights": [
                        {"x0": 0.14, "top": 0.176, "x1": 0.799, "bottom": 0.199},
                        {"x0": 0.144, "top": 0.204, "x1": 0.446, "bottom": 0.227},
                    ],
                    "image": "/v1/games/time-bomb/pages/8.png?quote=Prepare+the+Role+cards",
                }
            ]
        }
    )
    game: str = Field(description="The game's slug.")
    title: str
    page: int = Field(description="The page shown (1-based).")
    pages: int = Field(description="The book's page count.")
    width: float = Field(description="The page's width in points.")
    height: float = Field(description="The page's height in points.")
    highlights: list[HighlightOut] = Field(
        description="The quote's boxes, one per line it takes, in reading order; empty "
        "without a quote."
    )
    image: str = Field(description="The page's PNG, the quote highlighted (a relative URL).")


class ContentsSectionOut(BaseModel):
    number: int = Field(description="Its number in the table of contents (a section_id).")
    title: str = Field(description="The section's own heading.")
    path: list[str] = Field(description="Heading path, outermost first.")
    pages: list[int] = Field(description="The pages it spans; empty without pages.")
    chunk_id: str = Field(description="Its first passage's chunk id.")


class ContentsOut(BaseModel):
    game: str = Field(description="The game's slug.")
    title: str
    has_pages: bool = Field(
        description="A PDF: its pages can be shown as images (`/pages/{n}.png`)."
    )
    pages: int | None = Field(description="The book's page count; null without pages.")
    sections: list[ContentsSectionOut] = Field(description="In reading order.")


# --- health ---------------------------------------------------------------------------------


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class ModelsState(BaseModel):
    embedder: str | None = Field(description="The embedder's name, once known.")
    generator: str | None = Field(description="The answering backend, e.g. `extractive`.")


class Readiness(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "status": "ready",
                    "index_loaded": True,
                    "games": 4,
                    "models": {"embedder": "embeddinggemma-300m", "generator": "extractive"},
                    "warm_up_s": 9.214,
                    "error": None,
                }
            ]
        }
    )
    status: Literal["loading", "ready", "failed"] = Field(
        description="`ready` once the index and models are loaded and a warm-up ran."
    )
    index_loaded: bool
    warm_up_s: float | None = Field(
        None, description="How long loading and the warm-up took, once ready."
    )
    games: int = Field(description="Games in the loaded index.")
    models: ModelsState
    error: str | None = Field(None, description="Why loading failed.")


# --- OpenAI-compatible chat -----------------------------------------------------------------


class ContentPart(BaseModel):
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text or "" for p in self.content if p.type == "text")
        return self.content or ""


class StreamOptions(BaseModel):
    include_usage: bool = Field(
        False, description="End the stream with a chunk holding `usage` and no choices."
    )


class Usage(BaseModel):
    """Token counts, estimated: the local models do not report theirs. About four
    characters a token for alphabetic text and one per Chinese character; the prompt is the
    messages sent (Rulekeeper's own instructions and passages are not counted)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletionRequest(BaseModel):
    """OpenAI's chat request; fields Rulekeeper does not use (temperature, ...) are ignored."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={
            "examples": [
                {
                    "model": "suros",
                    "messages": [{"role": "user", "content": "How do I win?"}],
                },
                {
                    "model": "rulekeeper",
                    "stream": True,
                    "messages": [
                        {"role": "user", "content": "In Suros, how many cards do I draw?"},
                        {"role": "assistant", "content": "Two cards [1]."},
                        {"role": "user", "content": "And when the deck is empty?"},
                    ],
                },
            ]
        },
    )
    model: str = Field(
        "rulekeeper",
        max_length=200,
        description="`rulekeeper` (the game from `game` or detected from the messages), or a "
        "game's slug, title or alias (that game); any other name is a 404 `model_not_found`.",
    )
    messages: list[ChatMessage] = Field(
        min_length=1,
        max_length=2 * MAX_HISTORY + 2,
        description="The last message is the question; earlier user/assistant pairs are "
        "the history. System messages are ignored: Rulekeeper keeps its own instructions.",
    )
    stream: bool = Field(False, description="Stream `chat.completion.chunk` server-sent events.")
    stream_options: StreamOptions | None = None
    game: str | None = Field(None, max_length=200, description="The game, overriding `model`.")
    k: int | None = Field(None, ge=1, le=MAX_REQUEST_K, description="Passages to retrieve.")


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop"] = "stop"


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    rulekeeper: AskResponse = Field(
        description="The full answer with citations and passages (a Rulekeeper extension)."
    )


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: ChunkDelta
    finish_reason: Literal["stop"] | None = None


class ChatCompletionChunk(BaseModel):
    """One streamed event; the one with `finish_reason` carries the full answer, and with
    `stream_options.include_usage` a last one with no choices carries `usage`."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    rulekeeper: AskResponse | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "rulekeeper"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
