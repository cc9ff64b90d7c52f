"""What the commands ask: the pipeline in this process, or the warm local service
(cli.service_client) standing in for it. Both answer to one protocol, `Rules`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the pipeline pulls in numpy and FAISS: `rules --help` should not wait
    from rag.reading.corpus import Corpus
    from rag.settings import Settings
    from rag.types import Chunk, GameSummary, StreamEvent, Turn


class Rules(Protocol):
    """What the commands ask: a Pipeline here, or the local service (cli.service_client)."""

    settings: Settings

    @property
    def corpus(self) -> Corpus: ...

    def games(self) -> list[GameSummary]: ...

    def chunks(self, game: str) -> list[Chunk]: ...

    def ask_stream(
        self,
        question: str,
        game: str | None = None,
        k: int | None = None,
        history: Sequence[Turn] = (),
    ) -> Iterator[StreamEvent]: ...
