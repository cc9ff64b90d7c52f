"""Generators: the model behind an answer's selection and conclusion.

Backends behind one interface. The extractive backend runs no model: an answer is its
quote layer alone (the closest sentences of the passage that answers best, verbatim). A
local GGUF model through llama-cpp-python adds what the answering stages ask of it: which
quoted sentences answer the question, and a conclusion, each reply shaped by a JSON schema that
llama.cpp turns into a grammar, so its form cannot go wrong. The openai backend
(rag/openai_generation.py) asks the same of a model behind an OpenAI-compatible server;
rag/backends.py picks the one the settings name.
"""

from __future__ import annotations

import re
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag.errors import ModelError
from rag.lang import sentence_spans
from rag.prompting import Prompt, system_message

# A sentence (or list item) written this many times means the model is looping.
MAX_REPEATS = 3
_MIN_REPEATED_CHARS = 6  # shorter pieces ("[1]", "1.") repeat legitimately
_LIST_NUMBER = re.compile(r"^\s*(?:\d+[.)、]|[-*•])\s*")
# This many markers in a row, nothing between them, is a model counting, not citing.
MAX_MARKER_RUN = 8
_MARKER_RUN = re.compile(rf"(?:\[\d+\]\s*){{{MAX_MARKER_RUN}}}")
_RECENT_CHARS = 200  # enough text to hold such a run split over many tokens
# llama.cpp reads a prompt this many tokens at a time, and a reply given up on stops between
# two such slices (nothing interrupts one): a long prompt otherwise holds the model for
# seconds before the first token. Smaller slices read more slowly on a CPU.
PROMPT_SLICE_TOKENS = 128

if TYPE_CHECKING:
    from rag.settings import Settings


class Stopped(Exception):
    """A reply ended early: whoever waited for it gave it up (see `Generator.stop_when`)."""


def _never() -> bool:
    return False


class Generator(ABC):
    name: str
    writes = True  # False: no model; answers are the quote layer alone

    @abstractmethod
    def stream(self, prompt: Prompt) -> Iterator[str]:
        """Yield the reply's text piece by piece as it is produced."""

    def complete(self, prompt: Prompt) -> str:
        return "".join(self.stream(prompt))

    def warm_up(self) -> None:
        """Load the model and read the fixed prompt prefix, so that the first question does
        not wait for either; a backend without a model has nothing to do."""
        return

    def stop_when(self, stopping: Callable[[], bool]) -> None:
        """End a reply early, raising Stopped, once `stopping()` holds, also where no piece
        comes for a while (a long prompt being read). A backend whose pieces come steadily
        needs nothing here: its caller can stop it between them."""
        return


class LlamaCppGenerator(Generator):
    """A GGUF chat model run by llama-cpp-python; loaded on first use, once."""

    def __init__(
        self,
        name: str,
        model_path: Path,
        *,
        n_ctx: int = 4096,
        threads: int = 2,
        temperature: float = 0.1,
        max_tokens: int = 512,
        seed: int | None = None,
        prompt_lookup: int = 0,
    ) -> None:
        self.name = f"llama:{name}"
        self.model_path = model_path
        self._n_ctx = n_ctx
        self._threads = threads
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._seed = seed
        self._prompt_lookup = prompt_lookup
        self._llm: Any = None

        # llama.cpp contexts are not thread-safe: one generation at a time per model.
        self.lock = threading.Lock()
        self._stopping: Callable[[], bool] = _never

    def stop_when(self, stopping: Callable[[], bool]) -> None:
        self._stopping = stopping

    def load(self) -> Any:
        if self._llm is None:
            try:
                llama = _llama_reading_in_slices()
            except ImportError as exc:
                raise ModelError(
                    "llama-cpp-python is not installed: run scripts/setup.sh "
                    "(it builds it with the CPU flags this machine needs)."
                ) from exc
            if not self.model_path.is_file():
                raise ModelError(
                    f"GGUF model {self.model_path} not found: run `rules models fetch`."
                )
            draft = None
            if self._prompt_lookup:
                # Drafts the next tokens from n-grams of the prompt: a conclusion or a
                # rendering copies rule wording, so drafts are often accepted whole.
                from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

                draft = LlamaPromptLookupDecoding(num_pred_tokens=self._prompt_lookup)
            self._llm = llama(
                model_path=str(self.model_path),
                n_ctx=self._n_ctx,
                n_threads=self._threads,
                n_threads_batch=self._threads,
                draft_model=draft,
                verbose=False,
            )
            self._llm.stopping = lambda: self._stopping()
        return self._llm

    def warm_up(self) -> None:
        # One token after the system prompt: llama.cpp keeps the prefix it evaluated and
        # reuses it for every prompt that starts the same way (all of them, see prompting).
        with self.lock:
            self.load().create_chat_completion(messages=[system_message()], max_tokens=1)

    def stream(self, prompt: Prompt) -> Iterator[str]:
        return stop_repeating(self._stream(prompt))

    def _stream(self, prompt: Prompt) -> Iterator[str]:
        with self.lock:
            llm = self.load()
            shape = {"type": "json_object", "schema": prompt.schema} if prompt.schema else None
            temperature, seed = prompt.sampling(self._temperature, self._seed)
            chunks = llm.create_chat_completion(
                messages=prompt.messages,
                temperature=temperature,
                max_tokens=prompt.max_tokens or self._max_tokens,
                seed=seed,
                response_format=shape,
                stream=True,
            )
            for chunk in chunks:
                delta = chunk["choices"][0].get("delta", {})
                text = delta.get("content")
                if text:
                    yield text


@cache
def _llama_reading_in_slices() -> type[Any]:
    """llama_cpp.Llama reading every prompt (and each token it writes) PROMPT_SLICE_TOKENS at
    a time, raising Stopped before a slice once its `stopping()` holds. Made on first use:
    llama_cpp loads only with a model."""
    from llama_cpp import Llama

    class SlicedLlama(Llama):
        stopping: Callable[[], bool] = staticmethod(_never)

        def eval(self, tokens: Sequence[int]) -> None:
            for start in range(0, len(tokens), PROMPT_SLICE_TOKENS):
                if self.stopping():
                    raise Stopped
                super().eval(tokens[start : start + PROMPT_SLICE_TOKENS])

    return SlicedLlama


def stop_repeating(pieces: Iterator[str], max_repeats: int = MAX_REPEATS) -> Iterator[str]:
    """Pass pieces through until one sentence has been written `max_repeats` times, or
    MAX_MARKER_RUN markers in a row.

    Small models sometimes fall into a loop that would run to max_tokens, seconds of noise on
    a CPU: "10. The hero dies. 11. The hero dies. ...", or "[1] [2] [3] [4] [5] ..."
    counting far past the passages given. A sentence counts once the next one has begun;
    the stream then ends, and closing the source stops generation.
    """
    unfinished = ""  # the text after the last sentence counted
    counts: Counter[str] = Counter()
    recent = ""
    try:
        for piece in pieces:
            recent = (recent + piece)[-_RECENT_CHARS:]
            if _MARKER_RUN.search(recent):
                return
            unfinished += piece
            spans = sentence_spans(unfinished)
            for start, end in spans[:-1]:
                sentence = _loop_key(unfinished[start:end])
                if len(sentence) >= _MIN_REPEATED_CHARS:
                    counts[sentence] += 1
                    if counts[sentence] >= max_repeats:
                        return
            if len(spans) > 1:
                unfinished = unfinished[spans[-1][0] :]
            yield piece
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            close()


def _loop_key(sentence: str) -> str:
    """A sentence without its list number, so "11. X" repeats "10. X"."""
    return _LIST_NUMBER.sub("", sentence).strip()


class ExtractiveGenerator(Generator):
    """No model: an answer is the quote layer alone (the closest sentences of the passage
    that answers best, verbatim), with no selection or conclusion written."""

    name = "extractive"
    writes = False

    def stream(self, prompt: Prompt) -> Iterator[str]:
        raise ModelError("The extractive backend runs no model; nothing should prompt it.")


def make_llama_generator(settings: Settings) -> LlamaCppGenerator:
    from rag.models import resolve_llm_path

    gen = settings.generation
    name, path = resolve_llm_path(gen.model, settings.model_dir)
    return LlamaCppGenerator(
        name,
        path,
        n_ctx=gen.n_ctx,
        threads=gen.threads,
        temperature=gen.temperature,
        max_tokens=gen.max_tokens,
        seed=gen.seed,
        prompt_lookup=gen.prompt_lookup,
    )


def llama_available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True
