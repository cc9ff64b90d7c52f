"""Load test of `POST /v1/ask` over loopback: requests/s and latency percentiles.

Starts the API in this process on 127.0.0.1 (a free port) with the configured models and
the chosen answering backend; builds the index in a temporary HOME and loads the models
before the clock starts; then sends the gold questions from a few concurrent clients until
the request budget or the time budget is spent. Only answered requests (200) count towards
requests/s and the latencies; the others are reported by status.

    python bench/load_api.py [--backend extractive|llama] [--requests 200]
                             [--concurrency 4] [--max-seconds 120] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from api.app import create_app
from api.server import running
from eval import DEFAULT_GOLD
from eval.runner import load_gold
from rag.metrics import percentile
from rag.settings import Settings, load_settings


def bench_settings(home: Path, backend: str, concurrency: int) -> Settings:
    """The configured settings and models, the index under `home`, the backend chosen and
    no limit in the way."""
    base = load_settings()
    return base.model_copy(
        update={
            "home": home,
            "models_dir": base.model_dir,
            "generation": base.generation.model_copy(update={"backend": backend}),
            "api": base.api.model_copy(
                update={
                    "rate_limit_per_minute": 1_000_000,
                    "queue_size": max(base.api.queue_size, concurrency),
                    "timeout_s": max(base.api.timeout_s, 600.0),
                }
            ),
        }
    )


def load(
    url: str,
    bodies: list[dict[str, Any]],
    requests: int,
    concurrency: int,
    max_seconds: float,
    *,
    new_connections: bool = False,
) -> dict[str, Any]:
    """`new_connections`: each request on a connection of its own, as from many visitors
    (several server processes share a socket, and a kept connection stays with one)."""
    numbers = itertools.count()
    # A client sends one request at a time: one kept connection is all it uses.
    limits = httpx.Limits(max_keepalive_connections=0 if new_connections else 1)
    lock = threading.Lock()
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    deadline = time.monotonic() + max_seconds

    def client() -> None:
        with httpx.Client(base_url=url, timeout=max_seconds + 60, limits=limits) as http:
            while time.monotonic() < deadline:
                with lock:
                    n = next(numbers)
                if n >= requests:
                    return
                started = time.perf_counter()
                status = http.post("/v1/ask", json=bodies[n % len(bodies)]).status_code
                with lock:
                    statuses[str(status)] += 1
                    if status == 200:
                        latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(client) for _ in range(concurrency)]:
            future.result()
    elapsed = time.perf_counter() - started
    return {
        "requests": sum(statuses.values()),
        "statuses": dict(statuses),
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(latencies) / elapsed, 2),
        "p50_s": round(percentile(latencies, 50) or 0.0, 3),
        "p95_s": round(percentile(latencies, 95) or 0.0, 3),
        "max_s": round(max(latencies, default=0.0), 3),
    }


def run(
    backend: str, requests: int, concurrency: int, max_seconds: float, gold: Path
) -> dict[str, Any]:
    bodies = [{"question": i.question, "game": i.game} for i in load_gold(gold)]
    with (
        tempfile.TemporaryDirectory() as home,
        running(
            create_app(bench_settings(Path(home), backend, concurrency)), ready_timeout_s=900
        ) as url,
    ):
        ready = httpx.get(f"{url}/readyz").json()
        httpx.post(f"{url}/v1/ask", json=bodies[0], timeout=600)  # loads the LLM, if any
        report = load(url, bodies, requests, concurrency, max_seconds)
    return {
        "backend": ready["models"]["generator"],
        "embedder": ready["models"]["embedder"],
        "concurrency": concurrency,
        **report,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=["extractive", "llama"], default="extractive")
    parser.add_argument("--requests", type=int, default=200, help="Request budget.")
    parser.add_argument("--concurrency", type=int, default=4, help="Concurrent clients.")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="Time budget.")
    parser.add_argument("--gold", type=Path, default=DEFAULT_GOLD, help="Questions to ask.")
    parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
    args = parser.parse_args()
    report = run(args.backend, args.requests, args.concurrency, args.max_seconds, args.gold)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{report['backend']} (embedder {report['embedder']}), {report['concurrency']} "
            f"clients: {report['requests']} requests in {report['seconds']} s, "
            f"{report['requests_per_s']} answers/s, p50 {report['p50_s']} s, "
            f"p95 {report['p95_s']} s, max {report['max_s']} s; statuses {report['statuses']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
