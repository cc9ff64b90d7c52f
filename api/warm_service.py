"""The warm local service behind `rules ask`: the API app (as `rules serve` runs it) on
127.0.0.1 and a free port, open only to the holder of a per-user token, stopping itself
after `service.idle_timeout_s` without a request.

    python -P -m api.warm_service --home HOME     (see api.local_state.service_command)

It records itself in the home (api.local_state) once its port is bound, and forgets itself
when it stops.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from api.app import create_app
from api.local_state import (
    HOME_OPTION,
    HOST,
    LOCK_FD_OPTION,
    SERVICE_MODULE,
    ServiceState,
    remove_state,
    rulekeeper_version,
    settings_fingerprint,
    write_state,
)
from rag.settings import MAX_QUESTION_CHARS, Settings, load_settings

log = logging.getLogger("rulekeeper.service")

# One player at a table: no rate limit, and the same question limit as an in-process answer.
_NO_RATE_LIMIT = 1_000_000


class IdleWatch:
    """ASGI middleware: how long since the last request finished, none being in flight
    (a streamed answer counts until its last event is sent)."""

    def __init__(self, app: ASGIApp, clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self._clock = clock
        self._active = 0  # touched on the event loop only
        self._last = clock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan lasts as long as the server
            await self.app(scope, receive, send)
            return
        self._active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self._active -= 1
            self._last = self._clock()

    def idle_for(self) -> float:
        return 0.0 if self._active else self._clock() - self._last


def local_settings(settings: Settings, token: str) -> Settings:
    """The settings served with: the token as the only key, no browser origins."""
    api = settings.api.model_copy(
        update={
            "api_keys": [token],
            "cors_origins": [],
            "rate_limit_per_minute": _NO_RATE_LIMIT,
            "max_question_chars": MAX_QUESTION_CHARS,
        }
    )
    return settings.model_copy(update={"api": api})


def _stop_when_idle(server: uvicorn.Server, watch: IdleWatch, idle_timeout_s: float) -> None:
    while not server.should_exit:
        time.sleep(min(idle_timeout_s / 4, 5.0))
        if watch.idle_for() >= idle_timeout_s:
            log.warning("idle for %.0f s: stopping", idle_timeout_s)
            server.should_exit = True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {SERVICE_MODULE}")
    parser.add_argument(HOME_OPTION, required=True, help="The Rulekeeper home it serves.")
    parser.add_argument(LOCK_FD_OPTION, type=int, help="Closed once recorded (the starter's).")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    settings = load_settings()
    if settings.home.resolve() != Path(args.home):
        # Its command line names its home: a service serving another would be stopped by
        # the wrong home's commands, and missed by its own.
        parser.error(f"the settings' home is {settings.home}, not {args.home}")
    token = secrets.token_urlsafe(32)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((HOST, 0))  # loopback only; the system picks a free port
    watch = IdleWatch(create_app(local_settings(settings, token)))
    server = uvicorn.Server(
        uvicorn.Config(watch, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    )
    state = ServiceState(
        pid=os.getpid(),
        port=sock.getsockname()[1],
        token=token,
        version=rulekeeper_version(),
        settings=settings_fingerprint(settings),
    )
    write_state(settings.home, state)
    if args.lock_fd is not None:
        os.close(args.lock_fd)  # recorded: other commands may look for services again
    log.warning("serving on %s (pid %d)", state.url, state.pid)
    idle = threading.Thread(
        target=_stop_when_idle,
        args=(server, watch, settings.service.idle_timeout_s),
        daemon=True,
    )
    idle.start()
    try:
        server.run(sockets=[sock])
    finally:
        remove_state(settings.home, state.pid)
        sock.close()


if __name__ == "__main__":
    main()
