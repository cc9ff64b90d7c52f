"""Optional API keys (constant-time check): secret keys for servers, publishable keys bound
to their pages' origins; token-bucket rate limits per visitor and per key (the buckets kept
in memory here, or shared by workers: api/shared_state.py); and a limit on request bodies."""

from __future__ import annotations

import hashlib
import hmac
import math
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network, ip_address
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import ApiError, speaks_openai
from rag.settings import ApiSettings, PublishableKey


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def _origin(url: str) -> str:
    """`scheme://host[:port]`, lowercased, as browsers send it in Origin."""
    parts = urlsplit(url.strip())
    return f"{parts.scheme}://{parts.netloc}".lower()


def page_origin(headers: Headers) -> str | None:
    """The origin of the page a request comes from: its Origin header, else its Referer's
    (browsers leave Origin off same-origin GETs but send the Referer)."""
    origin = headers.get("origin")
    if origin and origin != "null":
        return _origin(origin)
    referer = headers.get("referer")
    return _origin(referer) if referer else None


@dataclass(frozen=True)
class Grant:
    """What a valid key allows: which pages may use it, and its rate-limit bucket."""

    bucket: str
    origins: frozenset[str] | None = None  # None: any origin (a secret key)
    own_pages: bool = False  # the demo key: only from this server's own pages

    @property
    def secret(self) -> bool:
        return self.origins is None and not self.own_pages

    def allows(self, headers: Headers) -> bool:
        if self.secret:
            return True
        origin = page_origin(headers)
        if origin is None:
            return False
        if self.own_pages:
            return urlsplit(origin).netloc == headers.get("host", "").lower()
        return origin in (self.origins or ())


class ApiKeys:
    """The configured keys, kept as digests; comparing digests takes the same time per key.

    Secret keys are for servers; publishable keys for pages, bound to their origins. The demo
    key is derived from the others, so every worker (and restart) serves the same one.
    """

    def __init__(
        self,
        secret: Sequence[str],
        publishable: Sequence[PublishableKey] = (),
        *,
        demo: bool = False,
    ) -> None:
        self._grants: list[tuple[bytes, Grant]] = [
            (_digest(k), Grant(self.client_id(k))) for k in secret if k
        ]
        for p in publishable:
            origins = frozenset(_origin(o) for o in p.origins)
            self._grants.append((_digest(p.key), Grant(self.client_id(p.key), origins)))
        self.demo_key: str | None = None
        if demo and self._grants:
            seed = b"".join(sorted(digest for digest, _ in self._grants))
            self.demo_key = "pk_demo_" + hmac.new(seed, b"demo", "sha256").hexdigest()[:32]
            grant = Grant(self.client_id(self.demo_key), own_pages=True)
            self._grants.append((_digest(self.demo_key), grant))

    @classmethod
    def configured(cls, settings: ApiSettings) -> ApiKeys:
        return cls(settings.api_keys, settings.publishable_keys, demo=settings.demo_key)

    @property
    def required(self) -> bool:
        return bool(self._grants)

    @property
    def origins(self) -> list[str]:
        """The origins publishable keys are bound to (CORS must let them in)."""
        return sorted({o for _, grant in self._grants for o in grant.origins or ()})

    def grant(self, presented: str | None) -> Grant | None:
        if not presented:
            return None
        digest = _digest(presented)
        found = None
        for known, grant in self._grants:  # no early exit: every key is compared
            if hmac.compare_digest(digest, known):
                found = grant
        return found

    @staticmethod
    def client_id(presented: str) -> str:
        """A stable name for the key's rate-limit bucket that does not hold the key."""
        return "key:" + _digest(presented).hex()[:16]


def visitor_address(
    peer: str | None, headers: Headers, trusted: Sequence[IPv4Network | IPv6Network], header: str
) -> str:
    """The visitor's address: the peer's, unless the peer is a trusted proxy; then the last
    address in the proxy header that is not a trusted proxy (the ones before it are whatever
    the client claimed, so they are never believed)."""
    if peer is None:
        return "unknown"
    if not _is_trusted(peer, trusted):
        return peer
    forwarded = [a.strip() for line in headers.getlist(header) for a in line.split(",")]
    forwarded = [a for a in forwarded if a]
    for address in reversed(forwarded):
        if not _is_trusted(address, trusted):
            return address
    return forwarded[0] if forwarded else peer


def _is_trusted(address: str, trusted: Sequence[IPv4Network | IPv6Network]) -> bool:
    try:
        ip = ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in trusted)


def spend_token(
    tokens: float, at: float, now: float, capacity: float, rate: float
) -> tuple[float, float]:
    """A token bucket holding `tokens` at time `at`, refilled at `rate` a second up to
    `capacity`, asked for one token at `now`: (tokens left, seconds until one is due)."""
    tokens = min(capacity, tokens + max(0.0, now - at) * rate)
    if tokens >= 1.0:
        return tokens - 1.0, 0.0
    return tokens, (1.0 - tokens) / rate


class RateLimiter(ABC):
    """Token bucket per client: `per_minute` tokens, refilled evenly, bursts up to that."""

    def __init__(self, per_minute: int) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0  # tokens per second

    @abstractmethod
    def take(self, client: str) -> float:
        """Spend a token; returns 0 if allowed, else the seconds until a token is due."""


class MemoryRateLimiter(RateLimiter):
    """Buckets in this process's memory: a limit per worker."""

    def __init__(
        self,
        per_minute: int,
        *,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(per_minute)
        self._max_clients = max_clients
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at
        self._lock = threading.Lock()

    def take(self, client: str) -> float:
        with self._lock:
            now = self._clock()
            tokens, at = self._buckets.pop(client, (self.capacity, now))
            tokens, wait = spend_token(tokens, at, now, self.capacity, self.rate)
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
