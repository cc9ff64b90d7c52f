"""Load test of `POST /v1/ask` over loopback: requests/s and latency percentiles.

Starts the API in this process on 127.0.0.1 (a free port) with the configured models and
the chosen answering backend; builds the index in a temporary HOME (or `--home`, kept for
the next run) and loads the models
before the clock starts; then sends the gold questions from a few concurrent clients until
the request budget or the time budget is spent. Only answered requests (200) count towards
requests/s and the latencies; the others are reported by status, and answers given with the
rule text alone (the model saturated, `--rule-text-when-busy`) are counted apart.

`--stand-in-llm-s S` measures the queue without the LLM: a stand-in generator holds the
model's slot S seconds per answer (sleeping, so it takes none of the CPU a real LLM would).

    python bench/load_api.py [--backend extractive|llama] [--requests 200]
                             [--concurrency 4] [--max-seconds 120] [--json]
                             [--stand-in-llm-s 2.0] [--queue-timeout-s 30]
                             [--rule-text-when-busy]
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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from api.app import create_app
from api.server import running
from eval import DEFAULT_GOLD
from eval.metrics import percentile
from eval.runner import load_gold
from rag.generation import Generator
from rag.pipeline import Pipeline
from rag.prompting import Prompt
from rag.settings import Settings, load_settings


class StandInLLM(Generator):
    """Holds the model's slot as an LLM would, without its CPU: names the first candidate
    sentence, then writes a conclusion after `seconds`."""

    name = "stand-in"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def stream(self, prompt: Prompt) -> Iterator[str]:
        if prompt.task == "select":
            yield '{"ids": [1]}'
            return
        time.sleep(self.seconds)
        yield '{"conclusion": "See the rule."}'


def bench_settings(
    home: Path, backend: str, concurrency: int, queue_timeout_s: float, rule_text_when_busy: bool
) -> Settings:
    """The configured settings and models, the index under `home`, the backend chosen, a
    place in line for every client and no rate limit in the way."""
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
                    "queue_timeout_s": queue_timeout_s,
                    "rule_text_when_busy": rule_text_when_busy,
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
    rule_text_only = 0
    deadline = time.monotonic() + max_seconds

    def client() -> None:
        nonlocal rule_text_only
        with httpx.Client(base_url=url, timeout=max_seconds + 60, limits=limits) as http:
            while time.monotonic() < deadline:
                with lock:
                    n = next(numbers)
                if n >= requests:
                    return
                started = time.perf_counter()
                response = http.post("/v1/ask", json=bodies[n % len(bodies)])
                took = time.perf_counter() - started
                status = response.status_code
                with lock:
                    statuses[str(status)] += 1
                    if status == 200:
                        latencies.append(took)
                        rule_text_only += response.json()["rule_text_only"]

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
        "answers_per_min": round(60 * len(latencies) / elapsed, 1),
        "rule_text_only": rule_text_only,
        "p50_s": round(percentile(latencies, 50) or 0.0, 3),
        "p95_s": round(percentile(latencies, 95) or 0.0, 3),
        "max_s": round(max(latencies, default=0.0), 3),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    bodies = [{"question": i.question, "game": i.game} for i in load_gold(args.gold)]
    with tempfile.TemporaryDirectory() as temporary:
        settings = bench_settings(
            args.home or Path(temporary),
            args.backend,
            args.concurrency,
            args.queue_timeout_s,
            args.rule_text_when_busy,
        )
        stand_in = args.stand_in_llm_s
        pipeline = Pipeline(settings, generator=StandInLLM(stand_in)) if stand_in else None
        with running(create_app(settings, pipeline=pipeline), ready_timeout_s=900) as url:
            return measure(url, bodies, args)


def measure(url: str, bodies: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    ready = httpx.get(f"{url}/readyz").json()
    httpx.post(f"{url}/v1/ask", json=bodies[0], timeout=600)  # loads the LLM, if any
    report = load(url, bodies, args.requests, args.concurrency, args.max_seconds)
    return {
        "backend": ready["models"]["generator"],
        "embedder": ready["models"]["embedder"],
        "concurrency": args.concurrency,
        "queue_timeout_s": args.queue_timeout_s,
        "rule_text_when_busy": args.rule_text_when_busy,
        **report,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=["extractive", "llama"], default="extractive")
    parser.add_argument("--requests", type=int, default=200, help="Request budget.")
    parser.add_argument("--concurrency", type=int, default=4, help="Concurrent clients.")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="Time budget.")
    parser.add_argument("--gold", type=Path, default=DEFAULT_GOLD, help="Questions to ask.")
    parser.add_argument(
        "--stand-in-llm-s",
        type=float,
        default=0.0,
        help="Seconds a stand-in for the LLM holds the model per answer (0: the backend).",
    )
    parser.add_argument(
        "--queue-timeout-s",
        type=float,
        default=load_settings().api.queue_timeout_s,
        help="Longest wait in the model's line (api.queue_timeout_s).",
    )
    parser.add_argument(
        "--rule-text-when-busy",
        action="store_true",
        help="Answer with the rule text alone when the line is full or too slow.",
    )
    parser.add_argument(
        "--home", type=Path, help="Keep the index here between runs (default: a temporary one)."
    )
    parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
    args = parser.parse_args()
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{report['backend']} (embedder {report['embedder']}), {report['concurrency']} "
            f"clients: {report['requests']} requests in {report['seconds']} s, "
            f"{report['answers_per_min']} answers/min ({report['rule_text_only']} with the rule "
            f"text alone), p50 {report['p50_s']} s, p95 {report['p95_s']} s, "
            f"max {report['max_s']} s; statuses {report['statuses']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
