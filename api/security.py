"""Optional API keys (constant-time check), a per-client token-bucket rate limit, and a
limit on request bodies."""

from __future__ import annotations

import hashlib
import hmac
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import ApiError, speaks_openai


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class ApiKeys:
    """The configured keys, kept as digests; comparing digests takes the same time per key."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._digests = [_digest(k) for k in keys if k]

    @property
    def required(self) -> bool:
        return bool(self._digests)

    def valid(self, presented: str | None) -> bool:
        if not presented:
            return False
        digest = _digest(presented)
        matched = False
        for known in self._digests:  # no early exit: every key is compared
            matched |= hmac.compare_digest(digest, known)
        return matched

    @staticmethod
    def client_id(presented: str) -> str:
        """A stable name for the key's rate-limit bucket that does not hold the key."""
        return "key:" + _digest(presented).hex()[:16]


class RateLimiter:
    """Token bucket per client: `per_minute` tokens, refilled evenly, bursts up to that."""

    def __init__(
        self,
        per_minute: int,
        *,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._capacity = float(per_minute)
        self._rate = per_minute / 60.0  # tokens per second
        self._max_clients = max_clients
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at
        self._lock = threading.Lock()

    def take(self, client: str) -> float:
        """Spend a token; returns 0 if allowed, else the seconds until a token is due."""
        with self._lock:
            now = self._clock()
            tokens, at = self._buckets.pop(client, (self._capacity, now))
            tokens = min(self._capacity, tokens + (now - at) * self._rate)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / self._rate
            self._buckets[client] = (tokens, now)
            if len(self._buckets) > self._max_clients:
                self._buckets.popitem(last=False)  # the least recently seen client
            return wait


def retry_after_seconds(wait: float) -> int:
    return max(1, math.ceil(wait))


class BodyLimit:
    """ASGI middleware: 413 (as JSON) for a request body over `max_bytes`, whether its
    Content-Length announces it or it streams in without one."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> ApiError:
        return ApiError(
            413, "payload_too_large", f"The request body is over {self.max_bytes} bytes."
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            too_large = self._too_large().response(openai=speaks_openai(scope["path"]))
            await too_large(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                # Raised inside the route's body reading, so the app's handlers answer it.
                raise HTTPException(413, self._too_large().message)
            return message

        await self.app(scope, limited, send)
