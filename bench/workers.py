"""API workers on loopback: requests/s of `rules serve --workers N` for each N asked, and
whether follow-ups keep their game when consecutive turns land on different workers.

Builds the index once in a temporary HOME (as a deployment ships it), then for each N starts
`rules serve --workers N` on a free port and sends the gold questions from concurrent
clients (bench/load_api.py's load loop), each request on a new connection, as from many
visitors, so that the kernel spreads them over the workers. Follow-ups: two single-worker
servers sharing the HOME, each conversation's turns sent to them in turn. Answers are
extractive unless --backend says.

    python bench/workers.py [--workers 1 2] [--requests 300] [--concurrency 4]
                            [--conversations 40] [--backend extractive] [--home DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
from load_api import load

from eval import DEFAULT_GOLD
from eval.runner import load_gold
from rag.factory import make_pipeline
from rag.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent
FOLLOW_UPS = ("What happens next?", "And after that?")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def worker_env(home: Path, backend: str) -> dict[str, str]:
    """The configured settings, the index and state in `home`, no rate limit in the way and
    follow-ups placed by their conversation alone (no game named in them)."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RULEKEEPER_HOME": str(home),
        "RULEKEEPER_MODELS_DIR": str(load_settings().model_dir),
        "RULEKEEPER_GENERATION__BACKEND": backend,
        "RULEKEEPER_API__RATE_LIMIT_PER_MINUTE": "1000000",
        "RULEKEEPER_API__QUEUE_SIZE": "64",
    }


@contextmanager
def serving(env: dict[str, str], workers: int, log: Path) -> Iterator[str]:
    """`rules serve --workers N`; its URL once every worker answers /readyz with 200."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [sys.executable, "-m", "cli.main", "serve", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*args, "--workers", str(workers)], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        _wait_all_ready(url, workers, proc, log)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _wait_all_ready(url: str, workers: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    # The kernel hands each new connection to some worker: many 200s in a row, each on a new
    # connection, means every worker has loaded.
    needed, in_a_row = 10 * workers, 0
    deadline = time.monotonic() + 600
    while in_a_row < needed:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the API did not start:\n{log.read_text()[-2000:]}")
        try:
            ready = httpx.get(f"{url}/readyz", timeout=5).status_code == 200
        except httpx.TransportError:
            ready = False
        in_a_row = in_a_row + 1 if ready else 0
        time.sleep(0.02 if ready else 0.5)


def follow_ups(urls: list[str], bodies: list[dict[str, Any]], conversations: int) -> dict[str, Any]:
    """Conversations whose turns go to the servers in turn: how many kept their game."""
    kept = turns = 0
    for n in range(conversations):
        body = bodies[(n * 7) % len(bodies)]
        first = httpx.post(f"{urls[0]}/v1/ask", json=body, timeout=120).json()
        for i, question in enumerate(FOLLOW_UPS, start=1):
            turn = {"question": question, "conversation_id": first["conversation_id"]}
            answer = httpx.post(f"{urls[i % len(urls)]}/v1/ask", json=turn, timeout=120)
            turns += 1
            kept += answer.status_code == 200 and answer.json()["game"] == first["game"]
    return {"follow_ups": turns, "follow_ups_kept_game": kept}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--requests", type=int, default=300, help="Requests per worker count.")
    parser.add_argument("--concurrency", type=int, default=4, help="Concurrent clients.")
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--backend", default="extractive")
    parser.add_argument("--gold", type=Path, default=DEFAULT_GOLD)
    parser.add_argument(
        "--home", type=Path, help="A HOME to use (its index reused if current); default: a new one."
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    gold = load_gold(args.gold)
    bodies = [{"question": i.question, "game": i.game} for i in gold]
    report: dict[str, Any] = {"backend": args.backend, "concurrency": args.concurrency, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        home = args.home or Path(tmp)
        env = worker_env(home, args.backend)
        os.environ.update({k: v for k, v in env.items() if k.startswith("RULEKEEPER_")})
        make_pipeline(load_settings()).ensure_index()  # once, before any worker starts
        for workers in args.workers:
            with serving(env, workers, home / f"serve-{workers}.log") as url:
                httpx.post(f"{url}/v1/ask", json=bodies[0], timeout=600)
                run = load(url, bodies, args.requests, args.concurrency, 600, new_connections=True)
            report["runs"].append({"workers": workers, **run})
        with ExitStack() as stack:
            urls = [stack.enter_context(serving(env, 1, home / f"pair-{n}.log")) for n in (1, 2)]
            report.update(follow_ups(urls, bodies, args.conversations))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for run in report["runs"]:
        print(
            f"{run['workers']} worker(s), {args.backend}, {args.concurrency} clients: "
            f"{run['requests']} requests in {run['seconds']} s, {run['requests_per_s']} "
            f"answers/s, p50 {run['p50_s']} s, p95 {run['p95_s']} s; statuses {run['statuses']}"
        )
    print(
        f"follow-ups on the other worker that kept their conversation's game: "
        f"{report['follow_ups_kept_game']}/{report['follow_ups']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
