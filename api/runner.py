"""Model calls off the event loop: one at a time per worker, with a bounded waiting line.

A call is a blocking iterator (the pipeline's event stream). It runs whole on the single
model thread, so llama.cpp never sees two generations at once and a slow stream cannot
interleave with another. Its items cross to the event loop through a `Job`. Cancelling a job
(client gone, timeout) stops the iterator at its next item and closes it, freeing the model.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from api.errors import retry_later

T = TypeVar("T")


class JobCancelled(Exception):
    """The job was cancelled before it finished."""


class _Signal:
    pass


_END = _Signal()  # the call finished
_CANCELLED = _Signal()  # the job was cancelled


class _Failed:
    def __init__(self, error: Exception) -> None:
        self.error = error


class Job(Generic[T]):
    """The items of one call, handed from the model thread to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[T | _Signal | _Failed] = asyncio.Queue()
        self._cancelled = threading.Event()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Stop the call at its next item; a waiting `next()` raises JobCancelled now.

        Called on the event loop."""
        if not self._cancelled.is_set():
            self._cancelled.set()
            self._queue.put_nowait(_CANCELLED)

    def put_from_thread(self, item: T | _Signal | _Failed) -> None:
        """Called on the model thread."""
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the event loop closed: nobody is listening any more
            self._cancelled.set()

    async def next(self) -> T | None:
        """The next item, or None when the call is finished; re-raises the call's error."""
        item = await self._queue.get()
        if self.cancelled:
            raise JobCancelled
        if isinstance(item, _Failed):
            raise item.error
        if isinstance(item, _Signal):
            return None
        return item


class ModelRunner:
    def __init__(self, queue_size: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rulekeeper-model")
        self._limit = queue_size + 1  # the running call plus the waiting ones
        self._admitted = 0
        self._lock = threading.Lock()
        self._mean_call_s = 1.0  # moving mean, for Retry-After
        self._closing = threading.Event()

    def start(self, call: Callable[[], Iterator[T]]) -> Job[T]:
        """Queue a call, or refuse with 503 + Retry-After when the line is full."""
        with self._lock:
            if self._admitted >= self._limit or self._closing.is_set():
                raise retry_later(
                    503,
                    "busy",
                    "The server is answering other questions; retry shortly.",
                    max(1, math.ceil(self._mean_call_s)),
                )
            self._admitted += 1
        job: Job[T] = Job(asyncio.get_running_loop())
        self._executor.submit(self._run, call, job)
        return job

    def _run(self, call: Callable[[], Iterator[T]], job: Job[T]) -> None:
        started = time.monotonic()
        try:
            if not job.cancelled:
                items = call()
                try:
                    for item in items:
                        if job.cancelled or self._closing.is_set():
                            break
                        job.put_from_thread(item)
                finally:
                    close = getattr(items, "close", None)
                    if close is not None:
                        close()
            job.put_from_thread(_END)
        except Exception as exc:
            job.put_from_thread(_Failed(exc))
        finally:
            with self._lock:
                self._admitted -= 1
                self._mean_call_s += 0.2 * (time.monotonic() - started - self._mean_call_s)

    def close(self) -> None:
        """Refuse new calls, stop the running one at its next item, drop the waiting ones."""
        self._closing.set()
        self._executor.shutdown(wait=False, cancel_futures=True)
