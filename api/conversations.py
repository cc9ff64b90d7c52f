"""Per-conversation history kept by the server: bounded, least-recently-used, expiring.

The store a worker uses is chosen by the settings (api/shared_state.py): in this process's
memory, or shared by every worker (SQLite, Redis), so a follow-up may land on any worker.
Each store is atomic per call, so concurrent requests never see a half-updated conversation
and never get another conversation's turns. Histories are handed out as tuples (immutable).
"""

from __future__ import annotations

import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from rag.types import Turn


@dataclass
class _Conversation:
    turns: tuple[Turn, ...]
    used_at: float


class ConversationStore(ABC):
    @staticmethod
    def new_id() -> str:
        return "c_" + secrets.token_urlsafe(12)

    @abstractmethod
    def history(self, conversation_id: str) -> tuple[Turn, ...]:
        """The conversation's recent turns, oldest first; empty if unknown or expired."""

    @abstractmethod
    def append(self, conversation_id: str, turn: Turn) -> None:
        """Add a turn, keep the last `max_turns`, and mark the conversation used."""


class MemoryConversationStore(ConversationStore):
    """In this process's memory: one worker's conversations."""

    def __init__(
        self,
        *,
        max_conversations: int,
        ttl_s: float,
        max_turns: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_conversations = max_conversations
        self._ttl_s = ttl_s
        self._max_turns = max_turns
        self._clock = clock
        self._items: OrderedDict[str, _Conversation] = OrderedDict()
        self._lock = threading.Lock()

    def history(self, conversation_id: str) -> tuple[Turn, ...]:
        with self._lock:
            self._expire()
            found = self._items.get(conversation_id)
            if found is None:
                return ()
            found.used_at = self._clock()
            self._items.move_to_end(conversation_id)
            return found.turns

    def append(self, conversation_id: str, turn: Turn) -> None:
        with self._lock:
            self._expire()
            found = self._items.pop(conversation_id, None)
            turns = (*(found.turns if found else ()), turn)[-self._max_turns :]
            self._items[conversation_id] = _Conversation(turns, self._clock())
            while len(self._items) > self._max_conversations:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._items)

    def _expire(self) -> None:
        """Drop expired conversations; the oldest-used come first, so stop at a fresh one."""
        cutoff = self._clock() - self._ttl_s
        while self._items:
            oldest_id, oldest = next(iter(self._items.items()))
            if oldest.used_at > cutoff:
                break
            del self._items[oldest_id]
