"""Calls off the event loop, in lanes: the model's (one call at a time per worker, with a
bounded waiting line) and the rule text's (retrieval and quotes, no LLM, a few at once).

A call is a blocking iterator (the pipeline's event stream). It runs whole on one of its
lane's threads, so llama.cpp never sees two generations at once and a slow stream cannot
interleave with another. Its items cross to the event loop through a `Job`. Cancelling a job
(client gone, timeout) stops the iterator at its next item and closes it; a model call inside
it stops sooner, at its next token or while it reads its prompt (`Stoppable`), so the model
is free at once however long the answer had still to go. A job cancelled while it waits
leaves the line at once, so its place goes to the next caller.
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
from rag.generation import Generator, Stopped
from rag.prompting import Prompt

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
    """The items of one call, handed from its lane's thread to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, lane: Lane) -> None:
        self._loop = loop
        self._lane = lane
        self._queue: asyncio.Queue[T | _Signal | _Failed] = asyncio.Queue()
        self._cancelled = threading.Event()
        self._moved = asyncio.Event()  # the line moved: this job's place changed
        self.started = threading.Event()  # the lane began on it
        self.started_at: float | None = None  # when, on the monotonic clock (asyncio's)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @property
    def stopped(self) -> bool:
        """Cancelled, or its lane is closing: its call should end now."""
        return self.cancelled or self._lane.closing

    @property
    def position(self) -> int:
        """Calls ahead of this one (the running ones included); 0 once it started."""
        return self._lane.position(self)

    def cancel(self) -> None:
        """Stop the call at its next item (or token); a waiting `next()` raises JobCancelled
        now, and a job still in line leaves it.

        Called on the event loop."""
        if not self._cancelled.is_set():
            self._cancelled.set()
            self._lane.leave(self)
            self._queue.put_nowait(_CANCELLED)
            self._moved.set()

    def moved_from_thread(self) -> None:
        """Called under the lane's lock, on any thread."""
        with contextlib.suppress(RuntimeError):  # the event loop closed: nobody waits
            self._loop.call_soon_threadsafe(self._moved.set)

    async def wait_moved(self) -> None:
        """Until the line moves (a call ahead finished, left, or this one started)."""
        await self._moved.wait()
        self._moved.clear()

    def put_from_thread(self, item: T | _Signal | _Failed) -> None:
        """Called on the lane's thread."""
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


# The job the current thread runs, for `Stoppable` to look at between tokens.
_running_here = threading.local()


def _stopping() -> bool:
    job: Job[Any] | None = getattr(_running_here, "job", None)
    return job is not None and job.stopped


class Stoppable(Generator):
    """A generator whose replies end at their next piece (or, for a model that can, while
    it reads the prompt) once the job they are written for is cancelled, raising
    JobCancelled: a conclusion, a rendering or a re-ask holds the model for seconds between
    two of the pipeline's events, and a request that timed out or whose client left must free
    it at once, not when its answer would have ended. Outside a lane's job (warm-up, the
    command line) it changes nothing."""

    def __init__(self, inner: Generator) -> None:
        self.inner = inner
        self.name = inner.name
        self.writes = inner.writes
        inner.stop_when(_stopping)

    def stream(self, prompt: Prompt) -> Iterator[str]:
        if _stopping():  # before the prompt is read, which alone can take seconds
            raise JobCancelled
        pieces = self.inner.stream(prompt)
        try:
            for piece in pieces:
                if _stopping():
                    raise JobCancelled
                yield piece
        except Stopped:  # the model itself stopped, reading the prompt
            raise JobCancelled from None
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()  # ends llama.cpp's generation, releasing its lock

    def warm_up(self) -> None:
        self.inner.warm_up()


class Lane:
    """Calls run on `workers` threads, with up to `queue_size` more waiting in line."""

    def __init__(self, queue_size: int, *, workers: int = 1, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._workers = workers
        self._queue_size = queue_size
        self._running: list[Job[Any]] = []
        self._waiting: list[Job[Any]] = []  # in line, oldest first
        self._lock = threading.Lock()
        self._mean_call_s = 1.0  # moving mean, for Retry-After
        self._closing = threading.Event()

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    def start(self, call: Callable[[], Iterator[T]]) -> Job[T]:
        """Queue a call, or refuse with 503 + Retry-After when the line is full."""
        job: Job[T] = Job(asyncio.get_running_loop(), self)
        with self._lock:
            taken = not self._closing.is_set() and self._has_room()
            if taken:
                self._waiting.append(job)
        if not taken:
            raise self.busy()
        self._executor.submit(self._run, call, job)
        return job

    def _has_room(self) -> bool:
        """Whether a call would be taken now (a thread free, or a place in line)."""
        return len(self._waiting) < self._queue_size + self._workers - len(self._running)

    def busy(self) -> ApiError:
        """The 503 for a call turned away."""
        return retry_later(
            503,
            "busy",
            "The server is answering other questions; retry shortly.",
            self.expected_wait_s(),
        )

    def expected_wait_s(self) -> int:
        """Seconds until a new call at the back of the line would start."""
        with self._lock:
            ahead = len(self._waiting) + len(self._running)
        return max(1, math.ceil(self._mean_call_s * max(1, ahead) / self._workers))

    def position(self, job: Job[T]) -> int:
        with self._lock:
            if job in self._waiting:
                return self._waiting.index(job) + len(self._running)
            return 0

    def leave(self, job: Job[T]) -> None:
        """A cancelled job gives its place up at once (a running one frees its thread at its
        next item or token)."""
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
            self._running.append(job)
            job.started_at = time.monotonic()
            job.started.set()
            job.moved_from_thread()
            self._moved()
        started = job.started_at
        _running_here.job = job
        try:
            if not job.stopped:
                items = call()
                try:
                    for item in items:
                        if job.stopped:
                            break
                        job.put_from_thread(item)
                finally:
                    close = getattr(items, "close", None)
                    if close is not None:
                        close()
            job.put_from_thread(_END)
        except JobCancelled:  # stopped mid-reply: whoever waited was told on cancelling
            pass
        except Exception as exc:
            job.put_from_thread(_Failed(exc))
        finally:
            _running_here.job = None
            with self._lock:
                self._running.remove(job)
                self._mean_call_s += 0.2 * (time.monotonic() - started - self._mean_call_s)
                self._moved()

    def close(self) -> None:
        """Refuse new calls, stop the running ones at their next item, drop the waiting ones."""
        self._closing.set()
        self._executor.shutdown(wait=False, cancel_futures=True)
