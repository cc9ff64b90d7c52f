"""The backends the settings choose: the generator (`generation.backend`: extractive,
llama.cpp, or an OpenAI-compatible server) and the embedder (`embedding.backend`: local, or
such a server). The server backends, and httpx with them, load only when chosen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag.errors import ModelError
from rag.generation import ExtractiveGenerator, Generator, llama_available, make_llama_generator
from rag.searching.embedding import Embedder, make_embedder

if TYPE_CHECKING:
    from rag.settings import Settings


def make_generator(settings: Settings) -> Generator:
    """The configured backend; "auto" falls back to extractive when no LLM is installed."""
    backend = settings.generation.backend
    if backend == "extractive":
        return ExtractiveGenerator()
    if backend == "llama":
        return make_llama_generator(settings)
    if backend == "openai":
        from rag.openai_generation import make_openai_generator  # httpx loads only for this backend

        return make_openai_generator(settings)
    try:
        llama = make_llama_generator(settings)
    except ModelError:
        return ExtractiveGenerator()
    return llama if llama_available() else ExtractiveGenerator()


def embedder_for(settings: Settings) -> Embedder:
    """The embedder the settings name, at their precision, or their embedding server."""
    if settings.embedding.backend == "openai":
        # httpx loads only for this backend
        from rag.searching.openai_embedding import make_openai_embedder

        return make_openai_embedder(settings)
    return make_embedder(
        settings.embedding.model, settings.model_dir, precision=settings.embedding.precision
    )
