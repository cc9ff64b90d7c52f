"""One settings object, built from defaults, a TOML config file and environment variables.

Precedence (highest first): explicit overrides > RULEKEEPER_* environment variables >
the config file ($RULEKEEPER_CONFIG, else $RULEKEEPER_HOME/config.toml) > defaults.
Nested groups use a double underscore in the environment, e.g.
RULEKEEPER_GENERATION__BACKEND=extractive or RULEKEEPER_RETRIEVAL__K=8.

Unknown keys are errors, not silently ignored: a misspelt setting would otherwise leave the
default in force with nothing to say so.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from difflib import get_close_matches
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, IPvAnyNetwork, ValidationError
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

# Limits every front end shares, declared once; a setting narrowing one is bounded by it.
MAX_QUESTION_CHARS = 2000  # the longest question answered: longer ones are pasted text
MAX_K = 50  # the most passages a question may retrieve

ENV_PREFIX = "RULEKEEPER_"
# RULEKEEPER_* variables the project reads that are not settings, so never "unknown settings".
NON_SETTING_VARIABLES = frozenset(
    {
        "RULEKEEPER_CONFIG",  # which config file to read (config_path)
        "RULEKEEPER_OPENAI_API_KEY",  # the openai backends' key: a secret, kept out of settings
        "RULEKEEPER_LLAMA_CMAKE_ARGS",  # scripts/setup.sh: how llama.cpp is built
        "RULEKEEPER_WHEEL_CACHE",  # scripts/setup.sh: where built wheels are kept
        "RULEKEEPER_REAL_RULEBOOKS",  # tests/test_pdf.py: the real rulebooks' folder
    }
)
# Groups and their models reject keys they do not know: see the module docstring.
_FORBID = ConfigDict(extra="forbid")


def default_home() -> Path:
    return Path(os.environ.get("RULEKEEPER_HOME", Path.home() / ".rulekeeper")).expanduser()


def config_path() -> Path:
    explicit = os.environ.get("RULEKEEPER_CONFIG")
    return Path(explicit).expanduser() if explicit else default_home() / "config.toml"


class EmbeddingSettings(BaseModel):
    model_config = _FORBID

    backend: Literal["local", "openai"] = Field(
        "local",
        description="local: the model runs here. openai: an OpenAI-compatible /embeddings "
        "endpoint at openai.embedding_url, shared by many workers (changing the embedder "
        "rebuilds the index).",
    )
    model: str = Field(
        "embeddinggemma-300m",
        description="backend local: a registered name (see `rules doctor`), a local path to "
        "a sentence-transformers model, or a hub name if you have a hub connection. A "
        "server's model is openai.embedding_model.",
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
        description="Embedder weights: bfloat16 is faster than float32 with practically the "
        "same vectors; int8 is faster still but loses some recall.",
    )
    add_confirm_minutes: float = Field(
        10.0,
        gt=0,
        description="`rules add` goes ahead only with --yes when it estimates that embedding "
        "the rulebook takes longer than this many minutes.",
    )


class RetrievalSettings(BaseModel):
    model_config = _FORBID

    mode: Literal["hybrid", "dense", "bm25"] = Field("hybrid", description="Search mode.")
    k: int = Field(5, ge=1, le=MAX_K, description="Passages returned per question.")
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
    model_config = _FORBID

    backend: Literal["auto", "llama", "extractive", "openai"] = Field(
        "auto",
        description="auto: the LLM when its model file is present, else extractive. openai: "
        "an OpenAI-compatible chat server at openai.chat_url (llama.cpp's server, Ollama, "
        "vLLM), its key in RULEKEEPER_OPENAI_API_KEY or OPENAI_API_KEY.",
    )
    model: str = Field(
        "qwen2.5-1.5b-instruct",
        description="The GGUF model the llama backend (and auto) runs: a registered name or a "
        "path. A server's model is openai.chat_model.",
    )
    n_ctx: int = Field(4096, ge=512, description="LLM context size in tokens.")
    threads: int = Field(2, ge=1, description="CPU threads for the LLM.")
    temperature: float = Field(
        0.1,
        ge=0.0,
        le=2.0,
        description="Sampling temperature: a little above 0, because greedy decoding is more "
        "prone to falling into repeated runs; the fixed seed keeps answers repeatable.",
    )
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
        "disagree on); the conclusion rests on `basis` of them. Most passages have fewer and "
        "are quoted whole; the limit is high enough to keep a long passage's key facts and "
        "low enough to keep the prompt short.",
    )
    basis: int = Field(
        3,
        ge=1,
        description="Most quoted sentences the conclusion rests on: the likeliest to decide "
        "the question (with `select`, those the LLM chooses among all quoted). Fewer, the "
        "shorter the conclusion's prompt and the less a small model is distracted.",
    )
    select: bool = Field(
        False,
        description="Let the LLM choose which quoted sentences the conclusion rests on, at "
        "the cost of one more model call. Off: the `basis` likeliest; turn it on for a model "
        "that chooses better than that order.",
    )
    answer_yes_no: bool = Field(
        False,
        description="Let the LLM open the answer to a yes/no question with yes or no. Off: "
        "such a question gets the quoted rule and no conclusion, because a small model's "
        "yes or no is too often wrong; turn it on for a model that bench/yes_no.py shows "
        "is right.",
    )
    min_sentence_score: float = Field(
        0.39,
        description="Below this cosine similarity between the question and its closest "
        "sentence, each read under its section's name, the rulebook is taken as silent, "
        "rather than answering from an unrelated rule (suited to the default embedder; "
        "another may need another value); 0: never.",
    )
    conclude_from: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="From this confidence that the deciding sentence settles the question, "
        "the conclusion the model wrote is shown (when it passed its checks); below it the "
        "deciding sentence is the answer. 1: never, the default, as at no confidence were the "
        "default models' shown conclusions reliably right on books left out of the fit; "
        "choose one for another model with bench/deciding.py threshold. 0: always.",
    )
    min_score_unconcluded: float = Field(
        0.49,
        description="A question whose conclusion stated a number its quotes do not hold, "
        "and whose closest sentence scores under this, is answered that the rulebook does "
        "not seem to say it (the nearest rule text still shown): such a number was most "
        "likely made up (suited to the default embedder); 0: never. A conclusion that "
        "conclude_from keeps from being shown is written only for this, and only under it.",
    )
    reasks: int = Field(
        3,
        ge=0,
        description="A withheld conclusion that states numbers is asked for up to this many "
        "times more (at reask_temperature); if none of those states the same numbers, the "
        "model made them up and the rulebook does not seem to say it; 0: never.",
    )
    reask_temperature: float = Field(
        0.8, ge=0, description="Sampling temperature of the conclusions asked for again."
    )
    min_gloss_score: float = Field(
        0.6,
        description="A phrase of a Chinese conclusion or rendering and an English game term "
        "of its quotes (a heading or glossary entry) this alike by the embedder, each the "
        "other's closest, are taken as the same term: the English follows the phrase in "
        "brackets the first time, 潜行判定（Stealth test）, so a reader can match it to "
        "the quoted English; 1: never.",
    )


class OpenAISettings(BaseModel):
    """An OpenAI-compatible server as the LLM (generation.backend openai) or the embedder
    (embedding.backend openai): where it is and how to reach it. Its key is no setting, so that
    no config file holds it: RULEKEEPER_OPENAI_API_KEY, else OPENAI_API_KEY."""

    model_config = _FORBID

    chat_url: str = Field(
        "http://127.0.0.1:8080/v1",
        description="The chat server's API root (the URL before /chat/completions).",
    )
    chat_model: str = Field(
        "qwen2.5-1.5b-instruct", description="The model name the chat server knows."
    )
    embedding_url: str = Field(
        "http://127.0.0.1:8081/v1",
        description="The embedding server's API root (the URL before /embeddings).",
    )
    embedding_model: str = Field(
        "embeddinggemma-300m",
        description="The model name the embedding server knows (changing it rebuilds the index).",
    )
    timeout_s: float = Field(60.0, gt=0, description="Longest wait for the server's next piece.")
    retries: int = Field(2, ge=0, description="Retries on 429, 5xx or no connection, backing off.")
    retry_backoff_s: float = Field(
        0.5, ge=0, description="The first retry's wait, doubled each time."
    )


class PublishableKey(BaseModel):
    model_config = _FORBID

    key: str = Field(min_length=1, description="The key a page shows (widget `data-api-key`).")
    origins: list[str] = Field(
        min_length=1, description="The pages' origins allowed to use it, e.g. https://shop.example."
    )


class ApiSettings(BaseModel):
    model_config = _FORBID

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
    max_question_chars: int = Field(
        1000,
        ge=10,
        le=MAX_QUESTION_CHARS,
        description="Longest question the API accepts, in characters (422); the local "
        "service and the command line take the longest any front end does.",
    )
    max_body_bytes: int = Field(
        64_000, ge=1024, description="Largest request body the API reads, in bytes (413)."
    )
    queue_size: int = Field(
        8,
        ge=0,
        description="Questions per worker waiting for the model; beyond them a question is "
        "answered with the rule text alone (marked in the answer).",
    )
    queue_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Longest a question waits in line for the model; then its rule text is "
        "the answer, with a line saying the server was too busy for a conclusion.",
    )
    timeout_s: float = Field(
        120.0,
        gt=0,
        description="Longest a conclusion may take once the model starts on it; then it is "
        "stopped and the rule text is the answer.",
    )
    rule_text_queue_size: int = Field(
        32,
        ge=0,
        description="Questions per worker waiting to have their rule text found (no model; "
        "quick); beyond them, 503 busy.",
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
    model_config = _FORBID

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


class ShowingSettings(BaseModel):
    model_config = _FORBID

    width: int = Field(
        1200,
        ge=200,
        le=2400,
        description="Width in pixels of a rulebook page shown as an image, unless a viewer "
        "asks for another: sharp on a phone held upright.",
    )
    cache_mb: float = Field(
        200.0,
        ge=0,
        description="Most disk space the page images and section views kept under "
        "HOME/cache/pages may take; the least recently shown go first.",
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid"
    )

    home: Path = Field(default_factory=default_home, description="Index, models, user books.")
    corpus_dir: Path = Field(BUILTIN_CORPUS, description="The built-in rulebooks.")
    models_dir: Path | None = Field(None, description="Model files; default HOME/models.")
    embedding: EmbeddingSettings = EmbeddingSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    generation: GenerationSettings = GenerationSettings()
    openai: OpenAISettings = OpenAISettings()
    api: ApiSettings = ApiSettings()
    service: ServiceSettings = ServiceSettings()
    showing: ShowingSettings = ShowingSettings()
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
    """Build settings; a bad config file, key or value is a RulekeeperError naming where to fix
    it, in one line."""
    path = config_path()
    if path.exists():
        try:
            table = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise RulekeeperError(f"Config file {path} is not valid TOML: {exc}") from exc
        found = _unknown_key(table, Settings, ())
        if found:
            raise RulekeeperError(_unknown_message(str(path), *found, as_variable=False))
    _check_environment(os.environ)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise RulekeeperError(_describe(exc, path)) from exc


Key = tuple[str, ...]  # a setting's path: ("generation", "temperature")

# Settings that moved to another group. A config file or variable naming the old place is an
# error like any unknown key, its message naming the new place.
MOVED: dict[Key, Key] = {
    ("generation", "base_url"): ("openai", "chat_url"),
    ("generation", "timeout_s"): ("openai", "timeout_s"),
    ("generation", "retries"): ("openai", "retries"),
    ("generation", "retry_backoff_s"): ("openai", "retry_backoff_s"),
    ("embedding", "base_url"): ("openai", "embedding_url"),
}


def moved_message(key: Key, *, as_variable: bool = False) -> str | None:
    """ "setting a.b has moved to c.d" (with the variable to set instead, for a variable);
    None when the setting did not move."""
    moved = MOVED.get(key)
    if moved is None:
        return None
    instead = f" ({_variable(moved)})" if as_variable else ""
    return f"setting {'.'.join(key)} has moved to {'.'.join(moved)}{instead}"


def _unknown_key(value: Any, annotation: Any, key: Key) -> tuple[Key, list[str]] | None:
    """The first key within `value` (a config table, or a variable's JSON) that settings of
    type `annotation` do not have, with the keys valid in its place."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if not isinstance(value, Mapping):
            return None  # a wrong type is validation's to report
        fields = annotation.model_fields
        for name, item in value.items():
            if name not in fields:
                return (*key, str(name)), list(fields)
            found = _unknown_key(item, fields[name].annotation, (*key, name))
            if found:
                return found
    elif get_origin(annotation) is list and isinstance(value, list) and key:
        (item_type,) = get_args(annotation)
        for i, item in enumerate(value):
            found = _unknown_key(item, item_type, (*key[:-1], f"{key[-1]}[{i}]"))
            if found:
                return found
    return None


def _check_environment(environ: Mapping[str, str]) -> None:
    """Reject a RULEKEEPER_* variable that names no setting. pydantic-settings ignores an
    unknown top-level one, and rejects an unknown nested one without naming the variable."""
    for variable, value in environ.items():
        name = variable.upper()  # pydantic-settings matches variables case-insensitively
        if not name.startswith(ENV_PREFIX) or name in NON_SETTING_VARIABLES:
            continue
        key = tuple(name.removeprefix(ENV_PREFIX).lower().split("__"))
        found = _unknown_variable(key, value)
        if found:
            bad, valid = found
            # Suggest a variable for a misspelt variable, a dotted key inside its JSON.
            as_variable = len(bad) == len(key)
            raise RulekeeperError(_unknown_message(variable, bad, valid, as_variable=as_variable))


def _unknown_variable(key: Key, value: str) -> tuple[Key, list[str]] | None:
    model: type[BaseModel] = Settings
    for depth, part in enumerate(key):
        fields = model.model_fields
        if part not in fields:
            if depth < len(key) - 1:  # a misspelt group: no siblings to pick from
                return key, []
            valid = list(fields)
            if depth == 0:  # a misspelt RULEKEEPER_CONFIG, say
                valid += [v.removeprefix(ENV_PREFIX).lower() for v in sorted(NON_SETTING_VARIABLES)]
            return key, valid
        annotation = fields[part].annotation
        if depth == len(key) - 1:
            # The variable sets the field whole; a group or a list of them is JSON.
            try:
                return _unknown_key(json.loads(value), annotation, key)
            except ValueError:
                return None  # not JSON: validation reports it if it had to be
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return key, []  # a single value has no keys inside it
        model = annotation
    return None


def _variable(key: Iterable[str]) -> str:
    return ENV_PREFIX + "__".join(key).upper()


def _unknown_message(where: str, key: Key, valid: list[str], *, as_variable: bool) -> str:
    """`where: unknown setting a.b (did you mean a.c?)`, the nearest valid key spelt as the
    user would write it (a dotted key, or a variable's name)."""
    moved = moved_message(key, as_variable=as_variable)
    if moved is not None:
        return f"{where}: {moved}"
    spell: Callable[[Iterable[str]], str] = _variable if as_variable else ".".join
    by_case = {name.lower(): name for name in valid}  # `K` is no closer to `k` than `x` is
    near = get_close_matches(key[-1].lower(), list(by_case), n=1)
    meant: Key | None = (*key[:-1], by_case[near[0]]) if near else None
    if meant is None:  # perhaps in the wrong group, or the group itself misspelt
        # Not its own group's keys again: their shared prefix alone would pass for close.
        parent = ".".join(key[:-1]) + "."
        others = [k for k in _all_keys() if not (len(key) > 1 and k.startswith(parent))]
        anywhere = get_close_matches(".".join(key).lower(), others, n=1)
        meant = tuple(anywhere[0].split(".")) if anywhere else None
    if meant is not None:
        hint = f"did you mean {spell(meant)}?"
    elif valid:
        hint = "known here: " + ", ".join(name.upper() if as_variable else name for name in valid)
    else:
        hint = "no such setting"
    return f"{where}: unknown setting {'.'.join(key)} ({hint})"


def _all_keys() -> list[str]:
    """Every setting's dotted key: top-level ones and each group's."""
    keys = []
    for name, field in Settings.model_fields.items():
        group = field.annotation
        if isinstance(group, type) and issubclass(group, BaseModel):
            keys += [f"{name}.{inner}" for inner in group.model_fields]
        else:
            keys.append(name)
    return keys


def _describe(exc: ValidationError, path: Path) -> str:
    """One line naming the bad setting and both places it can come from."""
    first = exc.errors()[0]
    dotted = ".".join(str(part) for part in first["loc"])
    env = _variable(str(part) for part in first["loc"])
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    if first["type"] == "extra_forbidden":  # from overrides: the file and variables are checked
        moved = moved_message(tuple(str(part) for part in first["loc"]))
        if moved is not None:
            return f"The {moved}{more}."
        return f"Unknown setting {dotted}{more}. Fix {env} or {path}."
    return (
        f"Invalid setting {dotted} = {first.get('input')!r}: {first['msg']}{more}. "
        f"Fix {env} or {path}; `rules config` shows the settings."
    )
