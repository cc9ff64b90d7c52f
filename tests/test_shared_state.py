"""Conversations and rate limits shared by API workers: each store on its own (SQLite, a real
redis-server on loopback), then two real worker processes behind no balancer at all, a
follow-up and a rate limit crossing from one to the other."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import FakeEmbedder
from loopback import child_env, free_port, process, redis_server

from api.conversations import ConversationStore
from api.security import RateLimiter
from api.shared_state import (
    RedisConversationStore,
    RedisRateLimiter,
    SqliteConversationStore,
    SqliteRateLimiter,
    SqliteState,
    connect_redis,
    open_state,
)
from rag.errors import RulekeeperError
from rag.pipeline import Pipeline
from rag.settings import Settings
from rag.types import Turn

SUROS_Q = "How much HP does each player start with in Suros?"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


StoreMaker = Callable[..., ConversationStore]
LimiterMaker = Callable[..., RateLimiter]


@pytest.fixture(params=["sqlite", "redis"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backing(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """What two workers' stores share: one SQLite file, or one Redis database (emptied)."""
    if kind == "sqlite":
        return tmp_path / "state.sqlite3"
    redis = connect_redis(request.getfixturevalue("redis_url"))
    redis.flushdb()
    return redis


def conversations(kind: str, backing: Any, clock: Clock, **bounds: Any) -> ConversationStore:
    """A store as one worker opens it (a second call: another worker's)."""
    if kind == "sqlite":
        return SqliteConversationStore(SqliteState(backing), clock=clock, **bounds)
    return RedisConversationStore(backing, clock=clock, **bounds)


def limiter(kind: str, backing: Any, clock: Clock, per_minute: int) -> RateLimiter:
    if kind == "sqlite":
        return SqliteRateLimiter(SqliteState(backing), "visitor", per_minute, clock=clock)
    return RedisRateLimiter(backing, "visitor", per_minute, clock=clock)


def test_workers_share_conversations_bounded_least_recently_used(kind: str, backing: Any) -> None:
    clock = Clock()
    bounds = {"max_conversations": 2, "ttl_s": 60, "max_turns": 2}
    one, two = (conversations(kind, backing, clock, **bounds) for _ in range(2))
    for n in range(3):
        (one if n % 2 else two).append("a", Turn(f"q{n}", f"a{n}", "suros"))
    assert two.history("a") == (Turn("q1", "a1", "suros"), Turn("q2", "a2", "suros"))
    clock.now += 1
    one.append("b", Turn("q", "a", None))
    clock.now += 1
    two.history("a")  # used: "b" is now the least recently used
    clock.now += 1
    one.append("c", Turn("q", "a", None))
    assert two.history("b") == () and one.history("a") != () and two.history("c") != ()
    assert one.history("unknown") == ()


def test_unused_conversations_expire(kind: str, backing: Any) -> None:
    clock = Clock()
    store = conversations(kind, backing, clock, max_conversations=10, ttl_s=0.5, max_turns=4)
    store.append("a", Turn("q", "a", "suros"))
    clock.now += 0.6
    time.sleep(0.6)  # Redis expires keys on its own clock
    assert store.history("a") == ()


def test_concurrent_writers_in_two_workers_lose_no_turn(kind: str, backing: Any) -> None:
    stores = [conversations(kind, backing, Clock(), max_conversations=100, ttl_s=60, max_turns=99)]
    stores.append(
        conversations(kind, backing, Clock(), max_conversations=100, ttl_s=60, max_turns=99)
    )

    def write(n: int) -> None:
        for i in range(30):
            stores[i % 2].append(f"c{n}", Turn(f"{n}-{i}", "", None))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(write, range(8)))
    for n in range(8):
        assert [t.question for t in stores[n % 2].history(f"c{n}")] == [
            f"{n}-{i}" for i in range(30)
        ]


def test_a_limit_holds_across_workers_and_refills_evenly(kind: str, backing: Any) -> None:
    clock = Clock()
    one, two = (limiter(kind, backing, clock, per_minute=6) for _ in range(2))
    assert [(one, two)[n % 2].take("ip:a") for n in range(6)] == [0.0] * 6
    assert two.take("ip:a") == pytest.approx(10)  # one token every 10 s
    assert one.take("ip:b") == 0
    clock.now += 10
    assert one.take("ip:a") == 0 and two.take("ip:a") > 0


def test_the_settings_choose_the_store(settings: Settings, redis_url: str) -> None:
    api = settings.api
    sqlite = open_state(settings)
    assert isinstance(sqlite.conversations, SqliteConversationStore)
    assert (settings.home / "api-state.sqlite3").is_file()
    memory = settings.model_copy(update={"api": api.model_copy(update={"state_store": "memory"})})
    assert type(open_state(memory).key_limiter).__name__ == "MemoryRateLimiter"
    shared = settings.model_copy(update={"api": api.model_copy(update={"redis_url": redis_url})})
    assert isinstance(open_state(shared).visitor_limiter, RedisRateLimiter)


def test_an_unreachable_redis_is_one_clear_line() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(RulekeeperError, match=rf"^No Redis answers at api.redis_url = {url} "):
        connect_redis(url)


# --- two worker processes ------------------------------------------------------------------


def _ready(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    return check


@contextmanager
def worker(home: Path, log: Path, **settings: str) -> Iterator[str]:
    """An API worker process over conftest's fake pipeline in `home`; its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = child_env(
        RULEKEEPER_HOME=str(home),
        RULEKEEPER_PIPELINE_FACTORY="conftest:fake_pipeline",
        RULEKEEPER_RETRIEVAL__GAME_MARGIN="2.0",  # follow-ups are placed by the history
        **settings,
    )
    args = [sys.executable, "-m", "uvicorn", "--factory", "api.app:create_app"]
    args += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    with process(args, _ready(url), log=log, env=env):
        yield url


@pytest.fixture
def two_workers(
    kind: str, settings: Settings, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[str, str]]:
    """Two workers sharing one HOME: its index built once beforehand, as a deployment ships
    it, and its state store (or one Redis)."""
    Pipeline(settings, embedder=FakeEmbedder()).ensure_index()
    store = {"RULEKEEPER_API__RATE_LIMIT_PER_MINUTE": "5"}
    if kind == "redis":
        redis = connect_redis(request.getfixturevalue("redis_url"))
        redis.flushdb()
        store["RULEKEEPER_API__REDIS_URL"] = request.getfixturevalue("redis_url")
    with ExitStack() as stack:
        started: list[AbstractContextManager[str]] = [
            worker(settings.home, tmp_path / f"worker-{n}.log", **store) for n in (1, 2)
        ]
        urls = [stack.enter_context(w) for w in started]
        yield urls[0], urls[1]


@pytest.mark.slow
def test_follow_ups_and_limits_cross_workers(two_workers: tuple[str, str]) -> None:
    one, two = two_workers
    first = httpx.post(f"{one}/v1/ask", json={"question": SUROS_Q}, timeout=30).json()
    assert first["game"] == "suros"
    follow_up = {"question": "What happens next?", "conversation_id": first["conversation_id"]}
    second = httpx.post(f"{two}/v1/ask", json=follow_up, timeout=30)
    assert second.status_code == 200 and second.json()["game"] == "suros"
    # Without the first turn, the other worker could not tell which game:
    alone = httpx.post(f"{two}/v1/ask", json={"question": "What happens next?"}, timeout=30)
    assert alone.status_code == 404, alone.text
    # Five a minute per visitor, whichever worker counts them: three spent above.
    statuses = [httpx.get(f"{url}/v1/games", timeout=30).status_code for url in (one, two, one)]
    assert statuses == [200, 200, 429]


def test_several_workers_share_the_cores_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from api import server

    started: list[int] = []
    monkeypatch.setattr(server.uvicorn, "run", lambda *a, **kw: started.append(kw["workers"]))
    monkeypatch.setattr(server.os, "cpu_count", lambda: 8)
    for name in ("OMP_NUM_THREADS", "RULEKEEPER_GENERATION__THREADS"):
        monkeypatch.delenv(name, raising=False)
    server.serve("127.0.0.1", 8000, 1)
    assert "OMP_NUM_THREADS" not in server.os.environ  # one worker: its models take all
    monkeypatch.setenv("RULEKEEPER_GENERATION__THREADS", "3")  # the user's choice stands
    server.serve("127.0.0.1", 8000, 4)
    assert server.os.environ["OMP_NUM_THREADS"] == "2"
    assert server.os.environ["RULEKEEPER_GENERATION__THREADS"] == "3"
    assert started == [1, 4]
    assert server.threads_per_worker(4, cores=2) == 1
