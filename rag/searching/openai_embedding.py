"""An OpenAI-compatible server's `/v1/embeddings` as the embedder: one embedding server for
many API workers. Imported only when the backend is used.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

import numpy as np

from rag.errors import ModelError
from rag.openai_server import OpenAIServer, server_for
from rag.searching.embedding import Embedder

if TYPE_CHECKING:
    from rag.settings import Settings


class OpenAIEmbedder(Embedder):
    """Vectors from a server's /embeddings: one embedding server for many API workers.

    Its name (in the index manifest) names the server's model and the prefixes, so changing
    either rebuilds the index. The server applies no query or passage prompt of its own; the
    settings' prefixes stand in for a model's prompts (EmbeddingGemma's, E5's).
    """

    def __init__(
        self, server: OpenAIServer, model: str, *, query_prefix: str = "", passage_prefix: str = ""
    ) -> None:
        super().__init__()
        self.name = f"openai:{model}"
        if query_prefix or passage_prefix:
            prefixes = json.dumps([query_prefix, passage_prefix]).encode()
            self.name += "#" + hashlib.sha256(prefixes).hexdigest()[:8]
        self.model = model
        self._server = server
        self._prefixes = {True: query_prefix, False: passage_prefix}
        self._dimension: int | None = None

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._dimension = self._encode(["dimension"], query=False).shape[1]
        return self._dimension

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        prefix = self._prefixes[query]
        body = {"model": self.model, "input": [prefix + t for t in texts]}
        reply = self._server.json("POST", "embeddings", body)
        try:
            rows = sorted(reply["data"], key=lambda row: row["index"])
            vectors = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except (TypeError, KeyError, ValueError) as exc:
            raise ModelError(
                f"The embedding server at {self._server.base_url} sent no embeddings "
                f"({type(exc).__name__}: {exc}): does it serve {self.model!r} for embeddings?"
            ) from exc
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ModelError(
                f"The embedding server at {self._server.base_url} sent {len(vectors)} vectors "
                f"for {len(texts)} texts."
            )
        self._dimension = vectors.shape[1]
        return vectors


def make_openai_embedder(settings: Settings) -> OpenAIEmbedder:
    emb = settings.embedding
    return OpenAIEmbedder(
        server_for(settings.openai.embedding_url, settings),
        settings.openai.embedding_model,
        query_prefix=emb.query_prefix,
        passage_prefix=emb.passage_prefix,
    )
