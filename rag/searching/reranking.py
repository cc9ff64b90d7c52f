"""Rerankers reorder the fused candidates by how well each passage answers the question.

No registry package carries a cross-encoder, so the reranker shipped here asks the answering
LLM (local, or behind an OpenAI-compatible server) a yes/no question per passage: passages
judged relevant move ahead of the others, each group keeping its fused order. (The first
token's probability of "yes" can be read without keeping every position's logits, as
bench/abstention.py does with a logits processor, but not through the Generator interface,
which returns text; a server behind the openai backend may not return it either.)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rag.errors import ModelError
from rag.prompting import Prompt, render, shorten
from rag.types import Hit

if TYPE_CHECKING:
    from rag.generation import Generator
    from rag.settings import Settings

JUDGE_TOKENS = 2  # "Yes" / "No" / 是 / 否


class Reranker(ABC):
    name: str

    @abstractmethod
    def score(self, question: str, hits: Sequence[Hit]) -> list[float]:
        """One relevance score per hit, higher is better."""

    def rerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        """Best score first; ties keep their fused order (sorted() is stable)."""
        scores = self.score(question, hits)
        order = sorted(range(len(hits)), key=lambda i: scores[i], reverse=True)
        return [hits[i] for i in order]


class LlmYesNoReranker(Reranker):
    def __init__(self, generator: Generator, passage_chars: int = 600) -> None:
        self.name = f"yesno:{generator.name}"
        self.generator = generator
        self._passage_chars = passage_chars

    def score(self, question: str, hits: Sequence[Hit]) -> list[float]:
        return [self._judge(question, hit) for hit in hits]

    def _judge(self, question: str, hit: Hit) -> float:
        content = render(
            "rerank.txt",
            question=question,
            section=hit.chunk.section_path,
            text=shorten(hit.chunk.text, self._passage_chars),
        )
        prompt = Prompt(
            "judge", question, [{"role": "user", "content": content}], max_tokens=JUDGE_TOKENS
        )
        reply = self.generator.complete(prompt)
        return 1.0 if reply.strip().lower().startswith(("yes", "是")) else 0.0


def make_reranker(settings: Settings, generator: Generator) -> Reranker:
    """The yes/no reranker on the answering model; with the extractive backend, which has
    none, on the local LLM."""
    from rag.generation import make_llama_generator

    if settings.retrieval.reranker != "llm-yesno":
        raise ModelError(f"Unknown reranker {settings.retrieval.reranker!r}; known: llm-yesno.")
    return LlmYesNoReranker(generator if generator.writes else make_llama_generator(settings))
