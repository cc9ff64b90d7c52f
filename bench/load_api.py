"""Load test of the ask endpoints over loopback, as the visitors of a busy page meet it: time
to the rule text, whether every answer carries it, how many conclusions the model wrote or
skipped, the server's errors, latency percentiles and answers/min; with
`--timeout-probe-s`, whether a conclusion stopped at the server's time limit frees the model
for the next question at once.

Starts the API in this process on 127.0.0.1 (a free port) with the configured models (or the
`pipeline_factory` setting's) and the chosen answering backend; builds the index in a
temporary HOME (or `--home`, kept for the next run) and loads the models before the clock
starts. Then `--visitors` clients ask at once, each its own `--questions` gold questions one
after the other, until done or the time budget is spent: to `POST /v1/ask`, or with
`--stream` to `/v1/ask/stream` as the widget does (its rule text timed from the first
`quotes` event). Only answered requests (200, with no error event) count towards answers/min
and the latencies; the others are reported by status. An answer's conclusion is written (by
the model, shown or withheld by its checks) or skipped (the model not had in time: the rule
text alone, `rule_text_only`).

The timeout probe serves the same pipeline again with `api.timeout_s` set to the probe's
seconds (shorter than a conclusion takes), asks questions until one's conclusion is stopped
at that limit, then at once another: its `queue_s` is how long the stopped one still held the
model.

`--stand-in-llm-s S` measures the line without the LLM: a stand-in generator holds the
model's slot S seconds per call (sleeping, so it takes none of the CPU a real LLM would; an
answer may call it more than once: renderings, re-asks).

    python bench/load_api.py [--backend extractive|llama] [--visitors 4] [--questions 50]
                             [--max-seconds 120] [--stream] [--timeout-probe-s 1.0]
                             [--stand-in-llm-s 2.0] [--queue-timeout-s 30] [--home DIR]
                             [--json]

Eight visitors asking three questions each through the widget's endpoint, then the probe:

    python bench/load_api.py --backend llama --stream --visitors 8 --questions 3 \
        --max-seconds 900 --timeout-probe-s 1.0
"""

from __future__ import annotations

import argparse
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
from rag.factory import make_pipeline
from rag.generation import Generator
from rag.pipeline import Pipeline
from rag.prompting import Prompt
from rag.settings import Settings, load_settings

# What a busy page is held to: every visitor sees the rule text within this...
RULE_TEXT_P95_TARGET_S = 2.0
# ...and a conclusion stopped at the time limit leaves the next question this little wait.
NEXT_QUEUE_TARGET_S = 1.0
# The stand-in writes its conclusion in this many pieces: a stopped one ends at the next.
STAND_IN_PIECES = 20
# The timeout probe asks up to this many questions for one whose conclusion the limit stops.
PROBE_TRIES = 5


class StandInLLM(Generator):
    """Holds the model's slot as an LLM would, without its CPU: names the first candidate
    sentence, then writes a conclusion over `seconds`, piece by piece (so that, like an
    LLM's, it stops at its next piece when its request is given up)."""

    name = "stand-in"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def stream(self, prompt: Prompt) -> Iterator[str]:
        if prompt.task == "select":
            yield '{"ids": [1]}'
            return
        yield '{"conclusion": "'
        for _ in range(STAND_IN_PIECES):
            time.sleep(self.seconds / STAND_IN_PIECES)
            yield " "
        yield 'See the rule."}'


def bench_settings(home: Path, backend: str, visitors: int, queue_timeout_s: float) -> Settings:
    """The configured settings and models, the index under `home`, the backend chosen, a
    place in line for every visitor and no rate limit in the way."""
    base = load_settings()
    return base.model_copy(
        update={
            "home": home,
            "models_dir": base.model_dir,
            "generation": base.generation.model_copy(update={"backend": backend}),
            "api": base.api.model_copy(
                update={
                    "rate_limit_per_minute": 1_000_000,
                    "queue_size": max(base.api.queue_size, visitors),
                    "queue_timeout_s": queue_timeout_s,
                }
            ),
        }
    )


@dataclass(frozen=True)
class Outcome:
    """One request: the visitor who sent it, its status ("200", "503", or "error:TYPE" for a
    stream's error event), the seconds to its rule text and to its whole answer, whether its
    conclusion was skipped for load, and whether one was shown."""

    visitor: int
    status: str
    rule_text_s: float | None = None
    answered_s: float | None = None
    rule_text_only: bool = False
    concluded: bool = False


def ask_plain(http: httpx.Client, body: dict[str, Any], visitor: int) -> Outcome:
    started = time.perf_counter()
    response = http.post("/v1/ask", json=body)
    took = time.perf_counter() - started
    if response.status_code != 200:
        return Outcome(visitor, str(response.status_code))
    answer = response.json()
    return Outcome(
        visitor,
        "200",
        took if answer["quotes"] else None,
        took,
        answer["rule_text_only"],
        answer["conclusion"] is not None,
    )


def ask_streaming(http: httpx.Client, body: dict[str, Any], visitor: int) -> Outcome:
    """As the widget asks: the rule text is timed from the first `quotes` event."""
    started = time.perf_counter()
    rule_text_s = answer = error = None
    with http.stream("POST", "/v1/ask/stream", json=body) as response:
        if response.status_code != 200:
            response.read()
            return Outcome(visitor, str(response.status_code))
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
        return Outcome(visitor, f"error:{error}", rule_text_s)
    took = time.perf_counter() - started
    return Outcome(
        visitor,
        "200",
        rule_text_s,
        took,
        answer["rule_text_only"],
        answer["conclusion"] is not None,
    )


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
    """`concurrency` visitors at once share out `requests` questions, each asking its own
    one after the other. `new_connections`: each request on a connection of its own, as
    from many visitors (several server processes share a socket, and a kept connection
    stays with one). `stream`: ask /v1/ask/stream, as the widget does."""
    # A visitor sends one request at a time: one kept connection is all it uses.
    limits = httpx.Limits(max_keepalive_connections=0 if new_connections else 1)
    lock = threading.Lock()
    outcomes: list[Outcome] = []
    deadline = time.monotonic() + max_seconds
    ask = ask_streaming if stream else ask_plain

    def visitor(v: int) -> None:
        # Interleaved, so that the visitors' first questions are different ones.
        mine = range(v, requests, concurrency)
        with httpx.Client(base_url=url, timeout=max_seconds + 60, limits=limits) as http:
            for n in mine:
                if time.monotonic() >= deadline:
                    return
                outcome = ask(http, bodies[n % len(bodies)], v)
                with lock:
                    outcomes.append(outcome)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(visitor, v) for v in range(concurrency)]:
            future.result()
    elapsed = time.perf_counter() - started
    answered = [o for o in outcomes if o.answered_s is not None]
    latencies = [o.answered_s for o in answered if o.answered_s is not None]
    to_rule_text = [o.rule_text_s for o in outcomes if o.rule_text_s is not None]
    skipped = sum(o.rule_text_only for o in answered)
    statuses = Counter(o.status for o in outcomes)
    return {
        "requests": len(outcomes),
        "statuses": dict(statuses),
        "server_errors": sum(n for s, n in statuses.items() if s[0] == "5" or ":" in s),
        "timeouts": statuses["504"] + statuses["error:timeout"],
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(answered) / elapsed, 2),
        "answers_per_min": round(60 * len(answered) / elapsed, 1),
        "with_rule_text": len(to_rule_text),
        "conclusions_written": len(answered) - skipped,
        "conclusions_shown": sum(o.concluded for o in answered),
        "conclusions_skipped": skipped,
        "rule_text_p50_s": _rounded(percentile(to_rule_text, 50)),
        "rule_text_p95_s": _rounded(percentile(to_rule_text, 95)),
        "p50_s": _rounded(percentile(latencies, 50)),
        "p95_s": _rounded(percentile(latencies, 95)),
        "max_s": _rounded(max(latencies, default=0.0)),
        "visitors": [_visitor(v, outcomes) for v in range(concurrency)],
    }


def _visitor(v: int, outcomes: list[Outcome]) -> dict[str, Any]:
    """What one visitor met: questions asked, how many came with the rule text, the slowest
    rule text."""
    mine = [o for o in outcomes if o.visitor == v]
    to_rule_text = [o.rule_text_s for o in mine if o.rule_text_s is not None]
    return {
        "visitor": v,
        "asked": len(mine),
        "with_rule_text": len(to_rule_text),
        "slowest_rule_text_s": _rounded(max(to_rule_text, default=None)),
    }


def _rounded(seconds: float | None) -> float:
    return round(seconds or 0.0, 3)


def timeout_probe(url: str, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """Questions until one's conclusion is stopped by the time limit (answered with its rule
    text alone, as nothing else is in line; a question the model is not asked about cannot
    be), then at once the next: how long the next waited for the model."""
    asked = 0
    with httpx.Client(base_url=url, timeout=600) as http:
        while True:
            stopped = http.post("/v1/ask", json=bodies[asked % len(bodies)])
            asked += 1
            done = stopped.status_code != 200 or stopped.json()["rule_text_only"]
            if done or asked == PROBE_TRIES:
                break
        after = http.post("/v1/ask", json=bodies[asked % len(bodies)])
    ok = stopped.status_code == after.status_code == 200
    return {
        "asked": asked,
        "statuses": [stopped.status_code, after.status_code],
        "stopped": ok and stopped.json()["rule_text_only"],
        "next_queue_s": round(after.json()["timings"]["queue_s"], 3) if ok else None,
    }


def targets(report: dict[str, Any]) -> dict[str, bool]:
    """Whether the run met what a busy page is held to."""
    met = {
        "every_answer_has_rule_text": report["with_rule_text"] == report["requests"],
        "rule_text_p95": (
            report["with_rule_text"] > 0 and report["rule_text_p95_s"] <= RULE_TEXT_P95_TARGET_S
        ),
        "no_server_errors": report["server_errors"] == 0,
        "every_conclusion_written_or_skipped": (
            report["conclusions_written"] + report["conclusions_skipped"] == report["requests"]
        ),
    }
    probe = report.get("timeout_probe")
    if probe is not None:
        queue_s = probe["next_queue_s"]
        met["timeout_frees_the_model"] = (
            probe["stopped"] and queue_s is not None and queue_s < NEXT_QUEUE_TARGET_S
        )
    return met


def run(args: argparse.Namespace) -> dict[str, Any]:
    bodies = [{"question": i.question, "game": i.game} for i in load_gold(args.gold)]
    with tempfile.TemporaryDirectory() as temporary:
        settings = bench_settings(
            args.home or Path(temporary), args.backend, args.visitors, args.queue_timeout_s
        )
        pipeline = make_pipeline(settings)
        if args.stand_in_llm_s:
            pipeline = Pipeline(
                pipeline.settings,
                embedder=pipeline.embedder,
                generator=StandInLLM(args.stand_in_llm_s),
            )
        with running(create_app(settings, pipeline=pipeline), ready_timeout_s=900) as url:
            report = measure(url, bodies, args)
        if args.timeout_probe_s:
            api = settings.api.model_copy(update={"timeout_s": args.timeout_probe_s})
            probing = settings.model_copy(update={"api": api})
            with running(create_app(probing, pipeline=pipeline), ready_timeout_s=900) as url:
                report["timeout_probe"] = {
                    "timeout_s": args.timeout_probe_s,
                    **timeout_probe(url, bodies),
                }
    report["targets"] = targets(report)
    return report


def measure(url: str, bodies: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    ready = httpx.get(f"{url}/readyz").json()
    httpx.post(f"{url}/v1/ask", json=bodies[0], timeout=600)  # loads the LLM, if any
    requests = args.visitors * args.questions
    report = load(url, bodies, requests, args.visitors, args.max_seconds, stream=args.stream)
    return {
        "backend": ready["models"]["generator"],
        "embedder": ready["models"]["embedder"],
        "endpoint": "/v1/ask/stream" if args.stream else "/v1/ask",
        "questions_per_visitor": args.questions,
        "queue_timeout_s": args.queue_timeout_s,
        **report,
    }


def summary(report: dict[str, Any]) -> str:
    r = report
    lines = [
        f"{r['backend']} (embedder {r['embedder']}), {r['endpoint']}, {len(r['visitors'])} "
        f"visitors x {r['questions_per_visitor']} questions: {r['requests']} requests in "
        f"{r['seconds']} s, {r['answers_per_min']} answers/min",
        f"rule text in {r['with_rule_text']} of {r['requests']} (p50 {r['rule_text_p50_s']} s, "
        f"p95 {r['rule_text_p95_s']} s); by visitor: "
        + ", ".join(
            f"{v['with_rule_text']}/{v['asked']} slowest {v['slowest_rule_text_s']} s"
            for v in r["visitors"]
        ),
        f"conclusions written {r['conclusions_written']} (shown {r['conclusions_shown']}), "
        f"skipped {r['conclusions_skipped']}; answered p50 {r['p50_s']} s, p95 {r['p95_s']} s, "
        f"max {r['max_s']} s",
        f"statuses {r['statuses']}: {r['server_errors']} server errors, {r['timeouts']} timeouts",
    ]
    probe = r.get("timeout_probe")
    if probe is not None:
        stopped = (
            "stopped at the limit"
            if probe["stopped"]
            else "NOT stopped (each ended within the limit: give a shorter --timeout-probe-s)"
        )
        lines.append(
            f"timeout probe (api.timeout_s {probe['timeout_s']}, {probe['asked']} asked): "
            f"statuses {probe['statuses']}, conclusion {stopped}, next queue_s "
            f"{probe['next_queue_s']}"
        )
    lines.append(
        "targets: "
        + ", ".join(f"{name} {'ok' if met else 'MISSED'}" for name, met in r["targets"].items())
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=["extractive", "llama"], default="extractive")
    parser.add_argument("--visitors", type=int, default=4, help="Visitors asking at once.")
    parser.add_argument(
        "--questions", type=int, default=50, help="Questions each visitor asks, one by one."
    )
    parser.add_argument("--max-seconds", type=float, default=120.0, help="Time budget.")
    parser.add_argument("--gold", type=Path, default=DEFAULT_GOLD, help="Questions to ask.")
    parser.add_argument(
        "--stream", action="store_true", help="Ask /v1/ask/stream, as the widget does."
    )
    parser.add_argument(
        "--timeout-probe-s",
        type=float,
        default=0.0,
        help="Then serve again with this api.timeout_s (shorter than a conclusion takes) and "
        "time the next question's wait after one stopped at it (0: no probe).",
    )
    parser.add_argument(
        "--stand-in-llm-s",
        type=float,
        default=0.0,
        help="Seconds a stand-in for the LLM holds the model per call (0: the backend).",
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
    print(json.dumps(report, indent=2) if args.json else summary(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
