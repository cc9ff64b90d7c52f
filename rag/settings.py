"""One settings object, built from defaults, a TOML config file and environment variables.

Precedence (highest first): explicit overrides > RULEKEEPER_* environment variables >
the config file ($RULEKEEPER_CONFIG, else $RULEKEEPER_HOME/config.toml) > defaults.
Nested groups use a double underscore in the environment, e.g.
RULEKEEPER_GENERATION__BACKEND=extractive or RULEKEEPER_RETRIEVAL__K=8.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, IPvAnyNetwork, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from rag.errors import RulekeeperError
from rag.types import Precision

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BUILTIN_CORPUS = PROJECT_ROOT / "corpus"


def default_home() -> Path:
    return Path(os.environ.get("RULEKEEPER_HOME", Path.home() / ".rulekeeper")).expanduser()


def config_path() -> Path:
    explicit = os.environ.get("RULEKEEPER_CONFIG")
    return Path(explicit).expanduser() if explicit else default_home() / "config.toml"


class EmbeddingSettings(BaseModel):
    backend: Literal["local", "openai"] = Field(
        "local",
        description="local: the model runs here. openai: an OpenAI-compatible /embeddings "
        "endpoint at base_url, shared by many workers (timeouts and retries as "
        "generation's; changing the embedder rebuilds the index).",
    )
    model: str = Field(
        "embeddinggemma-300m",
        description="Embedder: a registered name (see `rules doctor`), a local path to a "
        "sentence-transformers model, or a hub name if you have a hub connection; with "
        "backend openai, the model name the server knows.",
    )
    base_url: str = Field(
        "http://127.0.0.1:8081/v1", description="backend openai: the server's API root."
    )
    query_prefix: str = Field(
        "", description="backend openai: text put before each question (a model's prompt)."
    )
    passage_prefix: str = Field(
        "", description="backend openai: text put before each passage (a model's prompt)."
    )
    batch_size: int = Field(16, ge=1, description="Passages embedded per batch.")
    precision: Precision = Field(
        "bfloat16",
        description="Embedder weights: bfloat16 is ~1.7x faster than float32 on this CPU with "
        "the same vectors (cosine 0.9999); int8 is faster still but loses some recall.",
    )


class RetrievalSettings(BaseModel):
    mode: Literal["hybrid", "dense", "bm25"] = Field("hybrid", description="Search mode.")
    k: int = Field(5, ge=1, le=50, description="Passages returned per question.")
    candidates: int = Field(30, ge=1, description="Hits taken from each search before fusion.")
    rrf_k: int = Field(60, ge=1, description="Reciprocal-rank-fusion constant.")
    lexical_weight: float = Field(
        0.5, ge=0.0, description="Weight of BM25 beside dense search in the fusion."
    )
    rerank: bool = Field(False, description="Rerank fused candidates with the reranker.")
    reranker: str = Field("llm-yesno", description="Reranker name.")
    rerank_candidates: int = Field(8, ge=1, description="Fused hits passed to the reranker.")
    min_dense_score: float = Field(
        0.25, description="Below this best cosine similarity the rulebook is taken as silent."
    )
    game_margin: float = Field(
        0.08,
        ge=0.0,
        description="A question naming no game goes to the game whose best passage beats "
        "every other game's by this cosine margin; closer calls ask which game.",
    )
    hnsw_threshold: int = Field(
        50_000, ge=1, description="Chunk count past which an HNSW index replaces exact search."
    )


class GenerationSettings(BaseModel):
    backend: Literal["auto", "llama", "extractive", "openai"] = Field(
        "auto",
        description="auto: the LLM when its model file is present, else extractive. openai: "
        "an OpenAI-compatible chat server at base_url (llama.cpp's server, Ollama, vLLM), "
        "its key in RULEKEEPER_OPENAI_API_KEY or OPENAI_API_KEY.",
    )
    model: str = Field(
        "qwen2.5-1.5b-instruct",
        description="GGUF model: registered name or path; with backend openai, the model "
        "name the server knows.",
    )
    base_url: str = Field(
        "http://127.0.0.1:8080/v1",
        description="backend openai: the server's API root (the URL before /chat/completions).",
    )
    timeout_s: float = Field(
        60.0, gt=0, description="openai backends: longest wait for the server's next piece."
    )
    retries: int = Field(
        2, ge=0, description="openai backends: retries on 429, 5xx or no connection, backing off."
    )
    retry_backoff_s: float = Field(
        0.5, ge=0, description="openai backends: the first retry's wait, doubled each time."
    )
    n_ctx: int = Field(4096, ge=512, description="LLM context size in tokens.")
    threads: int = Field(2, ge=1, description="CPU threads for the LLM.")
    # Greedy decoding (0) degenerated into runs of markers on more gold questions than 0.1
    # did (eval/RESULTS.md); the fixed seed below keeps 0.1 repeatable.
    temperature: float = Field(0.1, ge=0.0, le=2.0)
    seed: int | None = Field(
        0,
        description="Sampling seed, set before every answer, so a question gets the same "
        "answer each time; unset: answers vary.",
    )
    max_tokens: int = Field(400, ge=16, description="Longest reply, in tokens.")
    prompt_lookup: int = Field(
        0,
        ge=0,
        description="Prompt lookup decoding: tokens drafted from the prompt's n-grams per "
        "step (llama.cpp); 0: off.",
    )
    passages: int = Field(5, ge=1, description="Top passages the candidate sentences come from.")
    quotes: int = Field(
        12,
        ge=1,
        description="Most sentences quoted, the closest to the question of the one passage "
        "that answers best (of two for a 'when can't I' question that two ways of choosing "
        "disagree on); the conclusion rests on the closest 3 of them (with `select`, on "
        "those the LLM chooses among all quoted). Most passages have fewer, so they are "
        "quoted whole: 12 carried more key facts than 7 on every gold set, the real "
        "rulebooks' too, never fewer, and more quoted nothing more that mattered "
        "(bench/quotes.py, eval/RESULTS.md session 20).",
    )
    select: bool = Field(
        False,
        description="Let the LLM choose which quoted sentences the conclusion rests on: one "
        "more model call, about 4 s on a 2-core CPU. Off: the closest 3; the default 1.5B "
        "model's choice was no better than that order on the gold set (eval/RESULTS.md). "
        "Turn it on for a model that chooses better.",
    )
    answer_yes_no: bool = Field(
        False,
        description="Let the LLM open the answer to a yes/no question with yes or no. Off: "
        "such a question gets the quoted rule and no conclusion, because the default 1.5B "
        "model's yes or no was right on 40 of 74 probe questions (bench/yes_no.py, "
        "eval/RESULTS.md); turn it on for a model that bench/yes_no.py shows is right.",
    )
    min_sentence_score: float = Field(
        0.39,
        description="Below this cosine similarity between the question and its closest "
        "sentence the rulebook is taken as silent (set for the default embedder on the gold "
        "set: eval/RESULTS.md); 0: never.",
    )
    conclude_from: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="From this confidence that its best sentence decides the question, a "
        "conclusion is written; below it the deciding sentence is the answer; 1: never.",
    )
    min_score_unconcluded: float = Field(
        0.49,
        description="A question whose conclusion stated a number its quotes do not hold, "
        "and whose closest sentence scores under this, is answered that the rulebook does "
        "not seem to say it (the nearest rule text still shown): measured on the gold set "
        "and held out on the real rulebooks (eval/RESULTS.md); 0: never.",
    )
    reasks: int = Field(
        3,
        ge=0,
        description="A withheld conclusion that states numbers is asked for up to this many "
        "times more (at reask_temperature); if none of those states the same numbers, the "
        "model made them up and the rulebook does not seem to say it (measured on the gold "
        "sets: eval/RESULTS.md); 0: never.",
    )
    reask_temperature: float = Field(
        0.8, ge=0, description="Sampling temperature of the conclusions asked for again."
    )
    min_gloss_score: float = Field(
        0.6,
        description="A phrase of a Chinese conclusion or rendering and an English game term "
        "of its quotes (a heading or glossary entry) this alike by the embedder, each the "
        "other's closest, are taken as the same term: the English follows the phrase in "
        "brackets the first time, 潜行判定（Stealth test）. Measured by reading the pairs on "
        "the gold sets (eval/RESULTS.md); 1: never.",
    )


class PublishableKey(BaseModel):
    key: str = Field(min_length=1, description="The key a page shows (widget `data-api-key`).")
    origins: list[str] = Field(
        min_length=1, description="The pages' origins allowed to use it, e.g. https://shop.example."
    )


class ApiSettings(BaseModel):
    cors_origins: list[str] = Field(
        default_factory=list,
        description="Allowed browser origins (publishable keys' origins are added).",
    )
    api_keys: list[str] = Field(
        default_factory=list,
        description="Secret keys, for servers calling the API (never put one in a page): any "
        "origin, limited per key only. Any key set: a key is required (X-API-Key or Bearer).",
    )
    publishable_keys: list[PublishableKey] = Field(
        default_factory=list,
        description="Keys for public pages: accepted only from their origins (the Origin "
        "header), limited per visitor and per key.",
    )
    demo_key: bool = Field(
        True,
        description="With keys on, /demo gets its own publishable key, valid only from this "
        "server's own pages.",
    )
    rate_limit_per_minute: int = Field(
        30, ge=1, description="Requests per visitor (client address) per minute."
    )
    key_rate_limit_per_minute: int = Field(
        600, ge=1, description="Requests per key per minute, all its visitors together."
    )
    trusted_proxies: list[IPvAnyNetwork] = Field(
        default_factory=list,
        description="Reverse proxies (addresses or networks) whose `client_ip_header` names "
        "the visitor; from any other peer the header is ignored.",
    )
    client_ip_header: str = Field(
        "X-Forwarded-For", description="The trusted proxies' header naming the visitor."
    )
    max_question_chars: int = Field(1000, ge=10)
    max_body_bytes: int = Field(64_000, ge=1024)
    queue_size: int = Field(8, ge=0, description="Waiting model calls per worker before 503.")
    queue_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Longest a request waits in line for the model; then 503 busy (or the "
        "rule text alone, with rule_text_when_busy).",
    )
    timeout_s: float = Field(
        120.0, gt=0, description="Longest an answer may take once the model starts on it (504)."
    )
    rule_text_when_busy: bool = Field(
        False,
        description="When the model's line is full or a request waited queue_timeout_s, "
        "answer with the verified rule text alone (no conclusion; marked in the answer) "
        "instead of 503 busy.",
    )
    conversation_ttl_s: float = Field(
        3600.0, gt=0, description="A conversation unused this long is forgotten."
    )
    max_conversations: int = Field(
        1000, ge=1, description="Conversations kept; the least recently used go."
    )
    conversation_turns: int = Field(8, ge=1, description="Turns kept per conversation.")
    state_store: Literal["sqlite", "memory"] = Field(
        "sqlite",
        description="Where conversations and rate limits are kept: sqlite, a file in HOME "
        "shared by every worker on this machine; memory, each worker its own. redis_url, "
        "when set, overrides it.",
    )
    state_file: Path | None = Field(
        None,
        description="The sqlite state store's file; default HOME/api-state.sqlite3 (set it "
        "when HOME is shipped read-only).",
    )
    redis_url: str | None = Field(
        None,
        description="A Redis server shared by workers on several machines, e.g. "
        "redis://cache.internal:6379/0 (the redis package: pip install 'rulekeeper[redis]').",
    )
    chat_sources: bool = Field(
        True,
        description="OpenAI-compatible chat: end the message with its sources (section and "
        "page), for chat UIs that show only the text.",
    )


class ServiceSettings(BaseModel):
    enabled: bool = Field(
        True,
        description="`rules ask` answers through a warm local service (started in the "
        "background when none runs); `chat`, `games` and `show` use it when it runs. false: "
        "answer in this process, as `--no-daemon` does.",
    )
    idle_timeout_s: float = Field(
        1800.0, gt=0, description="The local service stops after this long without a request."
    )
    connect_timeout_s: float = Field(
        2.0, gt=0, description="Longest wait for the local service to accept a connection."
    )
    start_timeout_s: float = Field(
        300.0,
        gt=0,
        description="Longest wait for a starting local service to load its index (a first "
        "index build included); then the answer comes from this process.",
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="RULEKEEPER_", env_nested_delimiter="__", extra="ignore"
    )

    home: Path = Field(default_factory=default_home, description="Index, models, user books.")
    corpus_dir: Path = Field(BUILTIN_CORPUS, description="The built-in rulebooks.")
    models_dir: Path | None = Field(None, description="Model files; default HOME/models.")
    embedding: EmbeddingSettings = EmbeddingSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    generation: GenerationSettings = GenerationSettings()
    api: ApiSettings = ApiSettings()
    service: ServiceSettings = ServiceSettings()
    pipeline_factory: str | None = Field(
        None,
        description="module:function building the pipeline from the settings (tests use it "
        "to run fake models in a service process); unset: the standard pipeline.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            TomlConfigSettingsSource(settings_cls, toml_file=config_path()),
        )

    @property
    def model_dir(self) -> Path:
        return self.models_dir or self.home / "models"

    @property
    def index_dir(self) -> Path:
        return self.home / "index"

    @property
    def user_books_dir(self) -> Path:
        return self.home / "books"

    @property
    def renderings_dir(self) -> Path:
        """Renderings of rulebook sentences into other languages, kept across processes."""
        return self.home / "renderings"


def load_settings(**overrides: Any) -> Settings:
    """Build settings; a bad config file or value is a RulekeeperError naming where to fix it."""
    path = config_path()
    if path.exists():
        try:
            tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise RulekeeperError(f"Config file {path} is not valid TOML: {exc}") from exc
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise RulekeeperError(_describe(exc, path)) from exc


def _describe(exc: ValidationError, path: Path) -> str:
    """One line naming the bad setting and both places it can come from."""
    first = exc.errors()[0]
    dotted = ".".join(str(part) for part in first["loc"])
    env = "RULEKEEPER_" + "__".join(str(part) for part in first["loc"]).upper()
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return (
        f"Invalid setting {dotted} = {first.get('input')!r}: {first['msg']}{more}. "
        f"Fix {env} or {path}; `rules config` shows the settings."
    )
