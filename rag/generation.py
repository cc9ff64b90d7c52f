"""Generators: turn a prompt (chat messages plus the numbered passages) into a token stream.

Two backends behind one interface: a local GGUF model through llama-cpp-python, and an
extractive backend that needs no model and quotes the passages' best sentences.
"""

from __future__ import annotations

import re
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag.errors import ModelError
from rag.lang import sentence_spans, split_sentences, tokenize
from rag.prompting import Prompt, phrases

# A sentence (or list item) written this many times means the model is looping.
MAX_REPEATS = 3
_MIN_REPEATED_CHARS = 6  # shorter pieces ("[1]", "1.") repeat legitimately
_LIST_NUMBER = re.compile(r"^\s*(?:\d+[.)、]|[-*•])\s*")
# This many markers in a row, nothing between them, is a model counting, not citing.
MAX_MARKER_RUN = 8
_MARKER_RUN = re.compile(rf"(?:\[\d+\]\s*){{{MAX_MARKER_RUN}}}")
_RECENT_CHARS = 200  # enough text to hold such a run split over many tokens

if TYPE_CHECKING:
    from rag.settings import Settings


class Generator(ABC):
    name: str

    @abstractmethod
    def stream(self, prompt: Prompt) -> Iterator[str]:
        """Yield the answer's text piece by piece as it is produced."""

    def complete(self, prompt: Prompt) -> str:
        return "".join(self.stream(prompt))


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
    ) -> None:
        self.name = f"llama:{name}"
        self.model_path = model_path
        self._n_ctx = n_ctx
        self._threads = threads
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._seed = seed
        self._llm: Any = None
        # llama.cpp contexts are not thread-safe: one generation at a time per model.
        self.lock = threading.Lock()

    def load(self) -> Any:
        if self._llm is None:
            try:
                from llama_cpp import Llama
            except ImportError as exc:
                raise ModelError(
                    "llama-cpp-python is not installed: run scripts/setup.sh "
                    "(it builds it with the CPU flags this machine needs)."
                ) from exc
            if not self.model_path.is_file():
                raise ModelError(
                    f"GGUF model {self.model_path} not found: run `rules models fetch`."
                )
            self._llm = Llama(
                model_path=str(self.model_path),
                n_ctx=self._n_ctx,
                n_threads=self._threads,
                n_threads_batch=self._threads,
                verbose=False,
            )
        return self._llm

    def stream(self, prompt: Prompt) -> Iterator[str]:
        return stop_repeating(self._stream(prompt))

    def _stream(self, prompt: Prompt) -> Iterator[str]:
        with self.lock:
            llm = self.load()
            chunks = llm.create_chat_completion(
                messages=prompt.messages,
                temperature=self._temperature,
                max_tokens=self._max_tokens,
                seed=self._seed,
                stream=True,
            )
            for chunk in chunks:
                delta = chunk["choices"][0].get("delta", {})
                text = delta.get("content")
                if text:
                    yield text


def stop_repeating(pieces: Iterator[str], max_repeats: int = MAX_REPEATS) -> Iterator[str]:
    """Pass pieces through until one sentence has been written `max_repeats` times, or
    MAX_MARKER_RUN markers in a row.

    Small models sometimes fall into a loop that would run to max_tokens, 20 s of noise on
    this CPU: "10. The hero dies. 11. The hero dies. ...", or "[1] [2] [3] [4] [5] ..."
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
    """No model: answers with the passages' sentences that best match the question.

    With evidence selected (the sentences the embedder found closest to the question, in
    any language) it quotes the best of those. Otherwise sentences are scored by word
    overlap with the question plus a prior for the passage's rank, so a Chinese question
    (no shared words) still gets the top passage's lead. Quoted sentences stay in the
    rulebook's language; headings follow the question's.
    """

    name = "extractive"

    def __init__(self, sentences: int = 4) -> None:
        self._sentences = sentences

    def stream(self, prompt: Prompt) -> Iterator[str]:
        words = phrases(prompt.lang)
        picked = self._pick(prompt)
        if not picked:
            yield words["not_covered"]
            return
        (first_n, first), *rest = picked
        yield f"{words['heading_conclusion']}: {first} [{first_n}]\n"
        if rest:
            yield f"{words['heading_conditions']}:\n"
            for n, sentence in rest:
                yield f"- {sentence} [{n}]\n"
        yield f"{words['heading_unsaid']}: {words['unsaid_default']}\n"

    def _pick(self, prompt: Prompt) -> list[tuple[int, str]]:
        if prompt.evidence:
            return prompt.evidence[: self._sentences]
        question = set(tokenize(prompt.question))
        scored: list[tuple[float, int, int, str]] = []
        for n, hit in enumerate(prompt.passages, start=1):
            for position, sentence in enumerate(split_sentences(hit.chunk.text)):
                overlap = len(question & set(tokenize(sentence)))
                prior = 1.0 / (n + position)
                scored.append((overlap + prior, n, position, sentence.strip()))
        best = sorted(scored, key=lambda s: s[0], reverse=True)[: self._sentences]
        # Present the chosen sentences in reading order within the best passage first.
        lead = best[0][1] if best else 0
        best.sort(key=lambda s: (s[1] != lead, s[1], s[2]))
        return [(n, sentence) for _, n, _, sentence in best if sentence]


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
    )


def llama_available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def make_generator(settings: Settings) -> Generator:
    """The configured backend; "auto" falls back to extractive when no LLM is installed."""
    backend = settings.generation.backend
    if backend == "extractive":
        return ExtractiveGenerator()
    if backend == "llama":
        return make_llama_generator(settings)
    try:
        llama = make_llama_generator(settings)
    except ModelError:
        return ExtractiveGenerator()
    return llama if llama_available() else ExtractiveGenerator()
