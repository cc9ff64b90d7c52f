"""Load test of the ask endpoints over loopback: answers/min, time to the rule text, and
latency percentiles.

Starts the API in this process on 127.0.0.1 (a free port) with the configured models and
the chosen answering backend; builds the index in a temporary HOME (or `--home`, kept for
the next run) and loads the models
before the clock starts; then sends the gold questions from a few concurrent clients until
the request budget or the time budget is spent, to `POST /v1/ask`, or with `--stream` to
`/v1/ask/stream` as the widget does (its rule text timed from the first `quotes` event).
Only answered requests (200, with no error event) count towards answers/min and the
latencies; the others are reported by status. Answers are counted by whether they carry the
rule text, and whether the model wrote their conclusion or it was skipped (the model not had
in time: the rule text alone, `rule_text_only`).

`--stand-in-llm-s S` measures the line without the LLM: a stand-in generator holds the
model's slot S seconds per answer (sleeping, so it takes none of the CPU a real LLM would).

    python bench/load_api.py [--backend extractive|llama] [--requests 200]
                             [--concurrency 4] [--max-seconds 120] [--stream] [--json]
                             [--stand-in-llm-s 2.0] [--queue-timeout-s 30]

Eight visitors asking three questions each through the widget's endpoint:

    python bench/load_api.py --backend llama --stream --concurrency 8 --requests 24
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
from dataclasses import dataclass
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


def bench_settings(home: Path, backend: str, concurrency: int, queue_timeout_s: float) -> Settings:
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
                }
            ),
        }
    )


@dataclass(frozen=True)
class Outcome:
    """One request: its status ("200", "503", or "error:TYPE" for a stream's error event),
    the seconds to its rule text and to its whole answer, and whether its conclusion was
    skipped for load."""

    status: str
    rule_text_s: float | None = None
    answered_s: float | None = None
    rule_text_only: bool = False


def ask_plain(http: httpx.Client, body: dict[str, Any]) -> Outcome:
    started = time.perf_counter()
    response = http.post("/v1/ask", json=body)
    took = time.perf_counter() - started
    if response.status_code != 200:
        return Outcome(str(response.status_code))
    answer = response.json()
    return Outcome("200", took if answer["quotes"] else None, took, answer["rule_text_only"])


def ask_streaming(http: httpx.Client, body: dict[str, Any]) -> Outcome:
    """As the widget asks: the rule text is timed from the first `quotes` event."""
    started = time.perf_counter()
    rule_text_s = answer = error = None
    with http.stream("POST", "/v1/ask/stream", json=body) as response:
        if response.status_code != 200:
            response.read()
            return Outcome(str(response.status_code))
        event = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif not line.startswith("data: "):
                continue
            elif event == "quotes" and rule_text_s is None:
                rule_text_s = time.perf_counter() - started
            elif event == "citations":
                answer = json.loads(line.removeprefix("data: "))
            elif event == "error":
                error = json.loads(line.removeprefix("data: "))["error"]["type"]
    if answer is None:
        return Outcome(f"error:{error}", rule_text_s)
    took = time.perf_counter() - started
    return Outcome("200", rule_text_s, took, answer["rule_text_only"])


def load(
    url: str,
    bodies: list[dict[str, Any]],
    requests: int,
    concurrency: int,
    max_seconds: float,
    *,
    new_connections: bool = False,
    stream: bool = False,
) -> dict[str, Any]:
    """`new_connections`: each request on a connection of its own, as from many visitors
    (several server processes share a socket, and a kept connection stays with one).
    `stream`: ask /v1/ask/stream, as the widget does."""
    numbers = itertools.count()
    # A client sends one request at a time: one kept connection is all it uses.
    limits = httpx.Limits(max_keepalive_connections=0 if new_connections else 1)
    lock = threading.Lock()
    outcomes: list[Outcome] = []
    deadline = time.monotonic() + max_seconds
    ask = ask_streaming if stream else ask_plain

    def client() -> None:
        with httpx.Client(base_url=url, timeout=max_seconds + 60, limits=limits) as http:
            while time.monotonic() < deadline:
                with lock:
                    n = next(numbers)
                if n >= requests:
                    return
                outcome = ask(http, bodies[n % len(bodies)])
                with lock:
                    outcomes.append(outcome)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(client) for _ in range(concurrency)]:
            future.result()
    elapsed = time.perf_counter() - started
    answered = [o for o in outcomes if o.answered_s is not None]
    latencies = [o.answered_s for o in answered if o.answered_s is not None]
    to_rule_text = [o.rule_text_s for o in outcomes if o.rule_text_s is not None]
    skipped = sum(o.rule_text_only for o in answered)
    return {
        "requests": len(outcomes),
        "statuses": dict(Counter(o.status for o in outcomes)),
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(answered) / elapsed, 2),
        "answers_per_min": round(60 * len(answered) / elapsed, 1),
        "with_rule_text": len(to_rule_text),
        "conclusions_written": len(answered) - skipped,
        "conclusions_skipped": skipped,
        "rule_text_p50_s": _rounded(percentile(to_rule_text, 50)),
        "rule_text_p95_s": _rounded(percentile(to_rule_text, 95)),
        "p50_s": _rounded(percentile(latencies, 50)),
        "p95_s": _rounded(percentile(latencies, 95)),
        "max_s": _rounded(max(latencies, default=0.0)),
    }


def _rounded(seconds: float | None) -> float:
    return round(seconds or 0.0, 3)


def run(args: argparse.Namespace) -> dict[str, Any]:
    bodies = [{"question": i.question, "game": i.game} for i in load_gold(args.gold)]
    with tempfile.TemporaryDirectory() as temporary:
        settings = bench_settings(
            args.home or Path(temporary), args.backend, args.concurrency, args.queue_timeout_s
        )
        stand_in = args.stand_in_llm_s
        pipeline = Pipeline(settings, generator=StandInLLM(stand_in)) if stand_in else None
        with running(create_app(settings, pipeline=pipeline), ready_timeout_s=900) as url:
            return measure(url, bodies, args)


def measure(url: str, bodies: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    ready = httpx.get(f"{url}/readyz").json()
    httpx.post(f"{url}/v1/ask", json=bodies[0], timeout=600)  # loads the LLM, if any
    report = load(
        url, bodies, args.requests, args.concurrency, args.max_seconds, stream=args.stream
    )
    return {
        "backend": ready["models"]["generator"],
        "embedder": ready["models"]["embedder"],
        "endpoint": "/v1/ask/stream" if args.stream else "/v1/ask",
        "concurrency": args.concurrency,
        "queue_timeout_s": args.queue_timeout_s,
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
        "--stream", action="store_true", help="Ask /v1/ask/stream, as the widget does."
    )
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
        "--home", type=Path, help="Keep the index here between runs (default: a temporary one)."
    )
    parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
    args = parser.parse_args()
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{report['backend']} (embedder {report['embedder']}), {report['endpoint']}, "
            f"{report['concurrency']} clients: {report['requests']} requests in "
            f"{report['seconds']} s, {report['answers_per_min']} answers/min; rule text in "
            f"{report['with_rule_text']} (p50 {report['rule_text_p50_s']} s, p95 "
            f"{report['rule_text_p95_s']} s); conclusions written {report['conclusions_written']}"
            f", skipped {report['conclusions_skipped']}; answered p50 {report['p50_s']} s, "
            f"p95 {report['p95_s']} s, max {report['max_s']} s; statuses {report['statuses']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
