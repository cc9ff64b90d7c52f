"""What one worker process holds while it serves: built in the app's lifespan, never at import."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Literal

import anyio

from api.errors import ApiError, retry_later
from api.runner import Lane, Stoppable
from api.schemas import ModelsState, Readiness
from api.security import ApiKeys, RateLimiter
from api.service import AskService
from api.shared_state import open_state
from rag.errors import RulekeeperError
from rag.pipeline import Pipeline
from rag.settings import Settings

log = logging.getLogger("rulekeeper.api")

State = Literal["loading", "ready", "failed"]
WARM_UP_QUESTION = "How do I set up the game?"
# A failed warm-up is tried again after this wait, doubled each time up to the longest.
WARM_UP_RETRY_S = 2.0
WARM_UP_LONGEST_RETRY_S = 60.0
# Questions finding their rule text at once: the embedder encodes one at a time, so a second
# thread only lets one search while another embeds.
RULE_TEXT_WORKERS = 2


@dataclass
class Runtime:
    settings: Settings
    pipeline: Pipeline
    service: AskService
    keys: ApiKeys
    visitor_limiter: RateLimiter
    key_limiter: RateLimiter
    state: State = "loading"
    error: str | None = None
    models: ModelsState = field(default_factory=lambda: ModelsState(embedder=None, generator=None))
    warm_up_s: float | None = None

    @classmethod
    def build(cls, settings: Settings, pipeline: Pipeline) -> Runtime:
        api = settings.api
        model = Lane(api.queue_size, name="rulekeeper-model")
        # The rule text needs no LLM: a lane of its own, so it never waits behind the model.
        quoting = Lane(api.rule_text_queue_size, workers=RULE_TEXT_WORKERS, name="rulekeeper-quote")
        pipeline.wrap_generator(Stoppable)  # a reply given up on frees the model at once
        shared = open_state(settings)  # conversations and limits every worker sees
        return cls(
            settings=settings,
            pipeline=pipeline,
            service=AskService(pipeline, model, quoting, shared.conversations, api),
            keys=ApiKeys.configured(api),
            visitor_limiter=shared.visitor_limiter,
            key_limiter=shared.key_limiter,
        )

    async def warm_up(self) -> None:
        """Load (or build) the index and the models and warm them up, off the event loop;
        /readyz turns 200 only then. A failure is retried, waiting longer each time: a
        worker started before the inference server it uses becomes ready when it does."""
        wait = WARM_UP_RETRY_S
        while True:
            try:
                self.models = await anyio.to_thread.run_sync(self._load)
                self.state, self.error = "ready", None
                return
            except Exception as exc:
                log.exception("the rulebook index or a model failed to load; retrying")
                self.error = str(exc) if isinstance(exc, RulekeeperError) else "see the server log"
                self.state = "failed"
            await anyio.sleep(wait)
            wait = min(wait * 2, WARM_UP_LONGEST_RETRY_S)

    def _load(self) -> ModelsState:
        started = time.perf_counter()
        pipeline = self.pipeline
        pipeline.ensure_index()
        # What the first questions would otherwise load: the embedder, each game's lexical
        # index (a search in every game), and the LLM with its prompt prefix.
        for game in pipeline.corpus.games:
            pipeline.retrieve(WARM_UP_QUESTION, game.slug)
        pipeline.generator.warm_up()
        self.warm_up_s = time.perf_counter() - started
        return ModelsState(embedder=pipeline.embedder.name, generator=pipeline.generator.name)

    def readiness(self) -> Readiness:
        return Readiness(
            status=self.state,
            warm_up_s=None if self.warm_up_s is None else round(self.warm_up_s, 3),
            index_loaded=self.state == "ready",
            games=len(self.pipeline.corpus.games) if self.state == "ready" else 0,
            models=self.models,
            error=self.error,
        )

    def require_ready(self) -> None:
        if self.state == "loading":
            raise retry_later(
                503, "not_ready", "The rulebook index is still loading; retry shortly.", 5
            )
        if self.state == "failed":
            raise ApiError(
                503,
                "unavailable",
                "The rules service failed to load its index or model; /readyz says why.",
            )

    def close(self) -> None:
        self.service.close()
