"""Running the API: `serve` for `rules serve`; `running` for tests and benchmarks."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from fastapi import FastAPI

# Off: uvicorn would believe X-Forwarded-For from 127.0.0.1; the visitor's address comes from
# the `api.trusted_proxies` setting alone (api.security.visitor_address).
PROXY_HEADERS = False


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """The machine's cores shared out among the workers (at least one each)."""
    return max(1, (cores or os.cpu_count() or 1) // workers)


def serve(host: str, port: int, workers: int) -> None:
    """Serve until interrupted. Each worker process builds its own pipeline (index, models)
    and model queue; conversations and rate limits are in the shared state store
    (api/shared_state.py), so any worker continues any conversation.

    With several workers each one's models get a share of the cores: left to themselves,
    the embedder (torch) and the LLM each take every core in every worker, and N workers
    then fight over them. Values the user set in the environment stand."""
    if workers > 1:
        threads = str(threads_per_worker(workers))
        os.environ.setdefault("OMP_NUM_THREADS", threads)  # read by torch as it loads
        os.environ.setdefault("RULEKEEPER_GENERATION__THREADS", threads)
    uvicorn.run(
        "api.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        timeout_graceful_shutdown=10,
        proxy_headers=PROXY_HEADERS,
    )


@contextmanager
def running(app: FastAPI, *, ready_timeout_s: float = 60.0) -> Iterator[str]:
    """Serve `app` on a free loopback port in a background thread; yields its base URL
    once /readyz says the index is loaded."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(app, log_level="warning", lifespan="on", proxy_headers=PROXY_HEADERS)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        _wait_ready(url, server, thread, ready_timeout_s)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


def _wait_ready(url: str, server: uvicorn.Server, thread: threading.Thread, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and thread.is_alive():
        if server.started:
            readiness = httpx.get(f"{url}/readyz", timeout=5).json()
            if readiness["status"] == "ready":
                return
            if readiness["status"] == "failed":
                raise RuntimeError(f"the API failed to load: {readiness['error']}")
        time.sleep(0.02)
    raise RuntimeError(f"the API at {url} was not ready within {timeout:.0f} s")
