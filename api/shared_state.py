"""What API workers must share to be interchangeable: conversations and rate-limit buckets.

A follow-up question may land on any worker behind a load balancer, and a limit must hold
however requests are spread, so both live in one store (the `api.state_store` and
`api.redis_url` settings): a SQLite file (WAL) for the workers of one machine, Redis for
workers on several, or this process's memory for a single worker. Times are wall-clock
seconds, the one clock that processes (and, kept in sync, machines) share.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from api.conversations import ConversationStore, MemoryConversationStore
from api.security import MemoryRateLimiter, RateLimiter, spend_token
from rag.errors import RulekeeperError
from rag.settings import Settings
from rag.types import Turn

if TYPE_CHECKING:
    from redis import Redis

STATE_FILE = "api-state.sqlite3"
BUSY_TIMEOUT_MS = 5_000  # writers queue on SQLite's lock; each holds it for well under 1 ms
REDIS_PREFIX = "rulekeeper:"


@dataclass(frozen=True)
class SharedState:
    conversations: ConversationStore
    visitor_limiter: RateLimiter
    key_limiter: RateLimiter


def open_state(settings: Settings) -> SharedState:
    """The store the settings ask for: Redis when `api.redis_url` is set, else
    `api.state_store`."""
    api = settings.api
    bounds: dict[str, Any] = {
        "max_conversations": api.max_conversations,
        "ttl_s": api.conversation_ttl_s,
        "max_turns": api.conversation_turns,
    }
    per_visitor, per_key = api.rate_limit_per_minute, api.key_rate_limit_per_minute
    if api.redis_url:
        redis = connect_redis(api.redis_url)
        return SharedState(
            RedisConversationStore(redis, **bounds),
            RedisRateLimiter(redis, "visitor", per_visitor),
            RedisRateLimiter(redis, "key", per_key),
        )
    if api.state_store == "sqlite":
        db = SqliteState(api.state_file or settings.home / STATE_FILE)
        return SharedState(
            SqliteConversationStore(db, **bounds),
            SqliteRateLimiter(db, "visitor", per_visitor),
            SqliteRateLimiter(db, "key", per_key),
        )
    return SharedState(
        MemoryConversationStore(**bounds),
        MemoryRateLimiter(per_visitor),
        MemoryRateLimiter(per_key),
    )


def _turns_json(turns: tuple[Turn, ...]) -> str:
    return json.dumps([asdict(t) for t in turns], ensure_ascii=False)


def _turns(data: str) -> tuple[Turn, ...]:
    return tuple(Turn(**t) for t in json.loads(data))


# ---------------------------------------------------------------- SQLite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY, turns TEXT NOT NULL, used_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS conversations_by_use ON conversations (used_at);
CREATE TABLE IF NOT EXISTS rate_buckets (
    bucket TEXT PRIMARY KEY, tokens REAL NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS rate_buckets_by_time ON rate_buckets (at);
"""


class SqliteState:
    """One connection per process to the shared file; each call one write transaction."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Autocommit mode: transactions are begun explicitly, IMMEDIATE, so that a
            # read-then-write never loses an update to another worker.
            self._db = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            # Conversations and buckets are not worth an fsync per request.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise RulekeeperError(
                f"The API state file {path} cannot be opened ({exc}): set api.state_file to "
                "a writable path, or api.redis_url."
            ) from exc
        self._lock = threading.Lock()  # one connection: one transaction at a time

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")


class SqliteConversationStore(ConversationStore):
    def __init__(
        self,
        db: SqliteState,
        *,
        max_conversations: int,
        ttl_s: float,
        max_turns: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._max_conversations = max_conversations
        self._ttl_s = ttl_s
        self._max_turns = max_turns
        self._clock = clock

    def history(self, conversation_id: str) -> tuple[Turn, ...]:
        with self._db.transaction() as db:
            now = self._expire(db)
            row = db.execute(
                "SELECT turns FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            if row is None:
                return ()
            db.execute("UPDATE conversations SET used_at = ? WHERE id = ?", (now, conversation_id))
            return _turns(row[0])

    def append(self, conversation_id: str, turn: Turn) -> None:
        with self._db.transaction() as db:
            now = self._expire(db)
            row = db.execute(
                "SELECT turns FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            turns = (*(_turns(row[0]) if row else ()), turn)[-self._max_turns :]
            db.execute(
                "INSERT OR REPLACE INTO conversations (id, turns, used_at) VALUES (?, ?, ?)",
                (conversation_id, _turns_json(turns), now),
            )
            db.execute(  # the least recently used beyond the bound
                "DELETE FROM conversations WHERE id IN (SELECT id FROM conversations "
                "ORDER BY used_at DESC LIMIT -1 OFFSET ?)",
                (self._max_conversations,),
            )

    def _expire(self, db: sqlite3.Connection) -> float:
        now = self._clock()
        db.execute("DELETE FROM conversations WHERE used_at <= ?", (now - self._ttl_s,))
        return now


class SqliteRateLimiter(RateLimiter):
    def __init__(
        self,
        db: SqliteState,
        name: str,
        per_minute: int,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(per_minute)
        self._db = db
        self._prefix = name + ":"
        self._clock = clock
        self._full_after_s = self.capacity / self.rate  # an older bucket is as good as none

    def take(self, client: str) -> float:
        bucket = self._prefix + client
        with self._db.transaction() as db:
            now = self._clock()
            db.execute("DELETE FROM rate_buckets WHERE at < ?", (now - self._full_after_s,))
            row = db.execute(
                "SELECT tokens, at FROM rate_buckets WHERE bucket = ?", (bucket,)
            ).fetchone()
            tokens, at = row or (self.capacity, now)
            tokens, wait = spend_token(tokens, at, now, self.capacity, self.rate)
            db.execute(
                "INSERT OR REPLACE INTO rate_buckets (bucket, tokens, at) VALUES (?, ?, ?)",
                (bucket, tokens, now),
            )
            return wait


# ---------------------------------------------------------------- Redis


def connect_redis(url: str) -> Redis:
    try:
        from redis import Redis
    except ImportError as exc:
        raise RulekeeperError(
            "api.redis_url is set but the redis package is not installed: "
            "pip install 'rulekeeper[redis]' (scripts/setup.sh installs it)."
        ) from exc
    client = Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    try:
        client.ping()
    except Exception as exc:  # redis raises its own ConnectionError, TimeoutError, AuthError...
        raise RulekeeperError(f"No Redis answers at api.redis_url = {url} ({exc}).") from exc
    return client


class RedisConversationStore(ConversationStore):
    """A list of JSON turns per conversation, expiring after the TTL unused; a sorted set of
    last uses bounds their number."""

    def __init__(
        self,
        redis: Redis,
        *,
        max_conversations: int,
        ttl_s: float,
        max_turns: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._redis = redis
        self._max_conversations = max_conversations
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._ttl_s = ttl_s
        self._max_turns = max_turns
        self._clock = clock
        self._used = REDIS_PREFIX + "conversations-by-use"

    def _key(self, conversation_id: str) -> str:
        return f"{REDIS_PREFIX}conversation:{conversation_id}"

    def history(self, conversation_id: str) -> tuple[Turn, ...]:
        key = self._key(conversation_id)
        found: list[Any] = self._redis.lrange(key, 0, -1)
        if not found:
            return ()
        with self._redis.pipeline() as pipe:  # MULTI/EXEC
            pipe.pexpire(key, self._ttl_ms)
            pipe.zadd(self._used, {conversation_id: self._clock()})
            pipe.execute()
        return tuple(Turn(**json.loads(t)) for t in found)

    def append(self, conversation_id: str, turn: Turn) -> None:
        key = self._key(conversation_id)
        now = self._clock()
        with self._redis.pipeline() as pipe:
            pipe.rpush(key, json.dumps(asdict(turn), ensure_ascii=False))
            pipe.ltrim(key, -self._max_turns, -1)
            pipe.pexpire(key, self._ttl_ms)
            pipe.zadd(self._used, {conversation_id: now})
            pipe.zremrangebyscore(self._used, "-inf", now - self._ttl_s)  # expired already
            pipe.zcard(self._used)
            count = pipe.execute()[-1]
        if count > self._max_conversations:
            oldest: list[tuple[bytes, float]] = self._redis.zpopmin(  # type: ignore[assignment]
                self._used, count - self._max_conversations
            )
            self._redis.delete(*(self._key(cid.decode()) for cid, _ in oldest))


# Atomic in Redis, so concurrent workers never both spend the last token: spend_token's
# arithmetic, on a hash {tokens, at} that expires once it would be full again.
_TAKE_SCRIPT = """
local capacity, rate, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(bucket[1]) or capacity
local at = tonumber(bucket[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(capacity / rate) + 1)
return tostring(wait)
"""


class RedisRateLimiter(RateLimiter):
    def __init__(
        self,
        redis: Redis,
        name: str,
        per_minute: int,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(per_minute)
        self._take = redis.register_script(_TAKE_SCRIPT)
        self._prefix = f"{REDIS_PREFIX}rate:{name}:"
        self._clock = clock

    def take(self, client: str) -> float:
        args = [repr(self.capacity), repr(self.rate), repr(self._clock())]
        return float(self._take(keys=[self._prefix + client], args=args))
