"""Shared fixtures: deterministic fake models so the whole pipeline runs in milliseconds.

Every test's state lives under RULEKEEPER_HOME pointing at tmp_path; real models are only
used by tests marked `real_models`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag.generation import ExtractiveGenerator, Generator
from rag.lang import tokenize
from rag.pipeline import Pipeline
from rag.prompting import Prompt
from rag.searching.embedding import Embedder
from rag.settings import BUILTIN_CORPUS, GenerationSettings, Settings, default_home
from rag.types import Chunk, Hit

# Where scripts/setup.sh put the real models, read before any test moves RULEKEEPER_HOME.
REAL_MODELS_DIR = Path(os.environ.get("RULEKEEPER_MODELS_DIR") or default_home() / "models")


def make_hits(*texts: str) -> list[Hit]:
    """Hits on one-passage sections of a game "g", ranked in the order given."""
    return [
        Hit(
            Chunk(
                id=f"g:{n}",
                game="g",
                section=("Game", f"Section {n}"),
                text=text,
                lang="en",
                start=0,
                end=len(text),
            ),
            score=1.0 / n,
            rank=n,
            dense_score=0.8,
        )
        for n, text in enumerate(texts, start=1)
    ]


class FakeEmbedder(Embedder):
    """Bag of hashed words: texts sharing words get similar vectors; no model needed."""

    name = "fake-hash-embedder"

    def __init__(self, dim: int = 256) -> None:
        super().__init__()
        self._dim = dim

    @property
    def dimension(self) -> int:
        return self._dim

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in tokenize(text):
                bucket = int(hashlib.md5(token.encode()).hexdigest(), 16) % self._dim
                out[row, bucket] += 1.0
            out[row, 0] += 0.01  # no all-zero vector for texts without known words
        return out


DEFAULT_SELECTION = '{"ids": [1]}'
DEFAULT_CONCLUSION = '{"conclusion": "See the rule."}'


def first_rule(prompt: Prompt) -> str:
    """The first rule sentence a conclusion prompt shows: what a fake conclusion restates,
    so that the checks can vouch for it."""
    found = re.search(r"^1\. \([^)]*\) (.*)$", prompt.messages[-1]["content"], re.M)
    assert found is not None, "not a conclusion prompt"
    return found[1]


class ScriptedGenerator(Generator):
    """Replies with queued texts per task, streamed word by word; records the prompts it got.

    Unscripted, a selection names the first candidate and a conclusion says "See the rule."
    A scripted conclusion's "{rule}" becomes the first rule sentence shown (JSON-escaped),
    so that the conclusion restates a quote.
    """

    name = "scripted"

    def __init__(
        self, conclusions: list[str] | None = None, selections: list[str] | None = None
    ) -> None:
        self.conclusions = list(conclusions or [])
        self.selections = list(selections or [])
        self.prompts: list[Prompt] = []

    def reply(self, prompt: Prompt) -> str:
        if prompt.task == "select":
            return self.selections.pop(0) if self.selections else DEFAULT_SELECTION
        reply = self.conclusions.pop(0) if self.conclusions else DEFAULT_CONCLUSION
        if "{rule}" in reply:
            reply = reply.replace("{rule}", json.dumps(first_rule(prompt))[1:-1])
        return reply

    def stream(self, prompt: Prompt) -> Iterator[str]:
        self.prompts.append(prompt)
        words = self.reply(prompt).split(" ")
        for i, word in enumerate(words):
            yield word if i == len(words) - 1 else word + " "


def on_fake_scale(settings: Settings) -> Settings:
    """The settings with the closeness gates and glosses off, and every conclusion that
    passes its checks shown: the fake embedder's bag-of-words cosines are not on the real
    embedder's scale, nor its confidences (tests of them set them)."""
    generation = settings.generation.model_copy(
        update={
            "min_sentence_score": 0,
            "min_score_unconcluded": 0,
            "min_gloss_score": 1,
            "conclude_from": 0,
        }
    )
    return settings.model_copy(update={"generation": generation})


def fake_pipeline(settings: Settings) -> Pipeline:
    """What a `rules` process, or the local service it starts, builds under the setting
    pipeline_factory = "conftest:fake_pipeline" (tests/ on PYTHONPATH): no model loads."""
    return Pipeline(on_fake_scale(settings), embedder=FakeEmbedder(), generator=ScriptedGenerator())


@pytest.fixture
def rulebook(tmp_path: Path) -> Path:
    """A small user rulebook in Markdown, to add."""
    path = tmp_path / "pebble.md"
    path.write_text(
        "# Pebble Race\n\n## Setup\n\nEach player takes five pebbles and a cup.\n\n"
        "## Turn\n\nOn your turn, throw one pebble into the cup. A pebble that misses "
        "goes back to the supply.\n\n## Winning\n\nThe first player with an empty hand wins.\n",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("RULEKEEPER_HOME", str(home))
    monkeypatch.delenv("RULEKEEPER_CONFIG", raising=False)
    # The fake embedder's score margins say nothing about which game a question is about:
    # a question naming no game is not placed by content here (tests that want it say so).
    monkeypatch.setenv("RULEKEEPER_RETRIEVAL__GAME_MARGIN", "2.0")
    return home


@pytest.fixture
def settings(home: Path) -> Settings:
    return on_fake_scale(Settings(home=home, corpus_dir=BUILTIN_CORPUS))


@pytest.fixture
def real_settings(settings: Settings) -> Settings:
    """Test settings (state in tmp_path) that find the real, installed models."""
    return settings.model_copy(
        update={"models_dir": REAL_MODELS_DIR, "generation": GenerationSettings()}
    )


def ungated(settings: Settings) -> Settings:
    """The settings with no closeness gate: the Chinese stealth question's closest sentence,
    read under its section's name, scores just under the default gate, which takes the
    rulebook as silent on it; what these tests read is what answers it."""
    generation = settings.generation.model_copy(update={"min_sentence_score": 0.0})
    return settings.model_copy(update={"generation": generation})


@pytest.fixture
def pipeline(settings: Settings) -> Pipeline:
    """The real pipeline over the real corpus with the fake embedder and extractive answers."""
    return Pipeline(settings, embedder=FakeEmbedder(), generator=ExtractiveGenerator())


@pytest.fixture
def scripted() -> ScriptedGenerator:
    return ScriptedGenerator()


@pytest.fixture
def scripted_pipeline(settings: Settings, scripted: ScriptedGenerator) -> Pipeline:
    return Pipeline(settings, embedder=FakeEmbedder(), generator=scripted)


# --- API (api/): the app served by a live uvicorn on 127.0.0.1, over a given pipeline ------


@pytest.fixture
def serve_api() -> Iterator[Callable[..., str]]:
    """`serve_api(pipeline, **api_settings)` starts the app and returns its base URL.

    The rate limit is lifted unless a test sets it; servers stop at the end of the test.
    """
    from api.app import create_app
    from api.server import running
    from rag.settings import ApiSettings

    with contextlib.ExitStack() as stack:

        def start(pipeline: Pipeline, **api: Any) -> str:
            overrides = {"rate_limit_per_minute": 1_000_000, **api}
            settings = pipeline.settings.model_copy(update={"api": ApiSettings(**overrides)})
            return stack.enter_context(running(create_app(settings, pipeline=pipeline)))

        yield start


class SlowGenerator(Generator):
    """Selects the first candidate at once, then writes a plain-text conclusion: the first
    rule restated, then `pieces` more of its words, `delay` seconds apart (a conclusion uses
    only its quotes' words); records the rule, how far it got and whether it was closed
    early (the client left), to test streaming and the model queue."""

    name = "slow"

    def __init__(self, pieces: int = 20, delay: float = 0.05) -> None:
        self.pieces = pieces
        self.delay = delay
        self.produced = 0
        self.rule = ""
        self.started = threading.Event()
        self.finished = threading.Event()  # ran to the end or was closed

    def stream(self, prompt: Prompt) -> Iterator[str]:
        if prompt.task == "select":
            yield DEFAULT_SELECTION
            return
        self.rule = first_rule(prompt)
        words = self.rule.rstrip(".").split()
        self.started.set()
        try:
            yield self.rule + " "
            for i in range(self.pieces):
                time.sleep(self.delay)
                self.produced += 1
                yield words[i % len(words)] + " "
        finally:
            self.finished.set()


@pytest.fixture
def slow() -> SlowGenerator:
    return SlowGenerator()


@pytest.fixture
def slow_pipeline(pipeline: Pipeline, slow: SlowGenerator) -> Pipeline:
    return Pipeline(pipeline.settings, embedder=pipeline.embedder, generator=slow)


# --- Browser (tests marked `browser`): Debian's Chromium driven by Playwright -------------

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module (Playwright gives it a fresh profile folder)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()  # no cookies or storage shared between tests
    context.set_default_timeout(15_000)
    try:
        yield context.new_page()
    finally:
        context.close()
