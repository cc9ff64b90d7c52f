"""Model calls off the event loop: one at a time per worker, with a bounded waiting line.

A call is a blocking iterator (the pipeline's event stream). It runs whole on the single
model thread, so llama.cpp never sees two generations at once and a slow stream cannot
interleave with another. Its items cross to the event loop through a `Job`. Cancelling a job
(client gone, timeout) stops the iterator at its next item and closes it, freeing the model;
a job cancelled while it waits leaves the line at once, so its place goes to the next caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from api.errors import ApiError, retry_later

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

    def __init__(self, loop: asyncio.AbstractEventLoop, runner: ModelRunner) -> None:
        self._loop = loop
        self._runner = runner
        self._queue: asyncio.Queue[T | _Signal | _Failed] = asyncio.Queue()
        self._cancelled = threading.Event()
        self._moved = asyncio.Event()  # the line moved: this job's place changed
        self.started = threading.Event()  # the model began on it

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @property
    def position(self) -> int:
        """Calls ahead of this one (the running one included); 0 once it started."""
        return self._runner.position(self)

    def cancel(self) -> None:
        """Stop the call at its next item; a waiting `next()` raises JobCancelled now, and a
        job still in line leaves it.

        Called on the event loop."""
        if not self._cancelled.is_set():
            self._cancelled.set()
            self._runner.leave(self)
            self._queue.put_nowait(_CANCELLED)
            self._moved.set()

    def moved_from_thread(self) -> None:
        """Called under the runner's lock, on any thread."""
        with contextlib.suppress(RuntimeError):  # the event loop closed: nobody waits
            self._loop.call_soon_threadsafe(self._moved.set)

    async def wait_moved(self) -> None:
        """Until the line moves (a call ahead finished, left, or this one started)."""
        await self._moved.wait()
        self._moved.clear()

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
        self._queue_size = queue_size
        self._running: Job[Any] | None = None
        self._waiting: list[Job[Any]] = []  # in line, oldest first
        self._lock = threading.Lock()
        self._mean_call_s = 1.0  # moving mean, for Retry-After
        self._closing = threading.Event()

    def start(self, call: Callable[[], Iterator[T]]) -> Job[T]:
        """Queue a call, or refuse with 503 + Retry-After when the line is full."""
        job: Job[T] = Job(asyncio.get_running_loop(), self)
        with self._lock:
            if self._closing.is_set() or not self.has_room():
                raise self.busy()
            self._waiting.append(job)
        self._executor.submit(self._run, call, job)
        return job

    def has_room(self) -> bool:
        """Whether a call would be taken now (the model free, or a place in line)."""
        return len(self._waiting) < self._queue_size + (self._running is None)

    def busy(self, position: int | None = None) -> ApiError:
        """The 503 for a call turned away (or, at `position`, given up on while in line)."""
        return retry_later(
            503,
            "busy",
            "The server is answering other questions; retry shortly.",
            self.expected_wait_s(position),
            position=position,
        )

    def expected_wait_s(self, position: int | None = None) -> int:
        """Seconds until a call at `position` (default: a new one at the back) would start."""
        ahead = len(self._waiting) + (self._running is not None) if position is None else position
        return max(1, math.ceil(self._mean_call_s * max(1, ahead)))

    def position(self, job: Job[T]) -> int:
        with self._lock:
            if job in self._waiting:
                return self._waiting.index(job) + (self._running is not None)
            return 0

    def leave(self, job: Job[T]) -> None:
        """A cancelled job gives its place up at once (a running one frees the model at its
        next item)."""
        with self._lock:
            if job in self._waiting:
                self._waiting.remove(job)
                self._moved()

    def _moved(self) -> None:
        for waiting in self._waiting:
            waiting.moved_from_thread()

    def _run(self, call: Callable[[], Iterator[T]], job: Job[T]) -> None:
        with self._lock:
            if job not in self._waiting:  # it left the line while waiting
                return
            self._waiting.remove(job)
            self._running = job
            job.started.set()
            job.moved_from_thread()
            self._moved()
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
                self._running = None
                self._mean_call_s += 0.2 * (time.monotonic() - started - self._mean_call_s)
                self._moved()

    def close(self) -> None:
        """Refuse new calls, stop the running one at its next item, drop the waiting ones."""
        self._closing.set()
        self._executor.shutdown(wait=False, cancel_futures=True)
