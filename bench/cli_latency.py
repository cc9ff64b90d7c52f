"""`rules` as a player meets it at the table, timed from the shell: the same questions asked
cold in a new process each (`rules ask --no-daemon`), through the warm local service
(`rules ask`), and typed into one `rules chat` session; side by side in one run.

    python bench/cli_latency.py [--limit 20] [--gold eval/gold/gold.jsonl]
                                [--backend auto|llama|extractive] [--json]

Each command runs on a pseudo-terminal, as in a shell, so it streams as it does for a
person; the clock starts when the command is launched (or the question's line is sent to
chat) and stops when the screen first shows the rule text, the conclusion's first draft
token (dimmed), and the closing "Answered by" line. Medians and 95th percentiles are
printed per mode, with the service's resident memory. The first N gold questions that name
their game are used. The service is started and asked one question before its clock
starts, so it is warm (it is stopped at the end unless it was running before); chat's first
question, which loads the models, is not counted either.
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from eval import DEFAULT_GOLD
from eval.metrics import percentile
from eval.runner import load_gold

ROOT = Path(__file__).resolve().parent.parent
RULES = [sys.executable, "-m", "cli.main"]
# What the screen shows: the rule text's heading (either language), the draft in dim, the end.
RULE_TEXT = re.compile(r"Rule text|规则原文")
DRAFT = "\x1b[2m"  # the conclusion's draft is dimmed; nothing dim comes before it
ANSWERED = "Answered by"
# The final answer's passages are dimmed too: a draft is looked for before them.
AFTER_DRAFT = re.compile(r"Sources \(|Nearest passages \(|Answered by")
CHAT_PROMPT = re.compile(r"\S+> $")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-9A-Z]|\r")
QUESTION_TIMEOUT_S = 600.0
# Output looked through again with each new piece: a marker may be split between reads.
TAIL_OVERLAP = 200
# Asked before the clock starts, so the models are loaded; not a gold question, whose
# embedding would then be cached.
WARM_UP = "How does the game end?"


@dataclass
class Timing:
    rule_text_s: float | None = None
    first_token_s: float | None = None
    full_s: float | None = None


class Screen:
    """A process on a pseudo-terminal, its output kept raw (with ANSI codes)."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.fd, child = pty.openpty()
        self.process = subprocess.Popen(
            args, stdin=child, stdout=child, stderr=child, cwd=ROOT, env=env,
            start_new_session=True,
        )  # fmt: skip
        os.close(child)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.raw = ""

    def read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # the process closed the terminal
            return False
        self.raw += self._decoder.decode(data)
        return bool(data)

    def time(self, since: int, started: float, *, until_prompt: bool = False) -> Timing:
        """Watch the output past `since` until the answer is complete.

        Work is done only when output arrives, and on its tail: the answer is computed on
        the same two cores, and a watcher that polls and rescans the whole screen takes CPU
        from it."""
        timing = Timing()
        heading_at: int | None = None  # where the rule text's heading first shows
        checked = since  # output before this has been looked through
        deadline = started + QUESTION_TIMEOUT_S
        while (left := deadline - time.monotonic()) > 0:
            if not self.read(min(left, 1.0)):
                if self.process.poll() is not None:
                    return timing
                continue
            now = time.monotonic() - started
            if heading_at is None and (shown := RULE_TEXT.search(self.raw, since)):
                heading_at = shown.start()
                timing.rule_text_s = now
            if heading_at is not None and timing.first_token_s is None:
                after = AFTER_DRAFT.search(self.raw, heading_at)
                if DRAFT in self.raw[heading_at : after.start() if after else None]:
                    timing.first_token_s = now
            tail = _ANSI.sub("", self.raw[max(since, checked - TAIL_OVERLAP) :])
            checked = len(self.raw)
            if timing.full_s is None and ANSWERED in tail:
                timing.full_s = now
            done = timing.full_s is not None
            if done and (not until_prompt or CHAT_PROMPT.search(tail)):
                return timing
        return timing

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        os.close(self.fd)


def _ask(env: dict[str, str], question: str, game: str, *extra: str) -> Timing:
    started = time.monotonic()
    screen = Screen([*RULES, "ask", question, "--game", game, *extra], env)
    try:
        return screen.time(0, started)
    finally:
        screen.close()


def _chat(env: dict[str, str], items: list[tuple[str, str]]) -> list[Timing]:
    screen = Screen([*RULES, "chat", "--no-daemon"], env)
    timings = []
    try:
        _wait_prompt(screen, 0)
        for question, game in [(WARM_UP, items[0][1]), *items]:  # the first is not counted
            # A new topic each time, as each `rules ask` is.
            since = len(screen.raw)
            os.write(screen.fd, f"/game {game}\r".encode())
            _wait_prompt(screen, since)
            since = len(screen.raw)
            started = time.monotonic()
            os.write(screen.fd, f"{question}\r".encode())
            timings.append(screen.time(since, started, until_prompt=True))
    finally:
        screen.close()
    return timings[1:]


def _wait_prompt(screen: Screen, since: int) -> None:
    deadline = time.monotonic() + QUESTION_TIMEOUT_S
    while not CHAT_PROMPT.search(_ANSI.sub("", screen.raw[since:])):
        if time.monotonic() > deadline or (not screen.read(0.05) and screen.process.poll()):
            raise RuntimeError(f"chat showed no prompt:\n{_ANSI.sub('', screen.raw)}")


def _rules(env: dict[str, str], *args: str) -> str:
    run = subprocess.run(
        [*RULES, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return run.stdout


def _summary(timings: list[Timing]) -> dict[str, Any]:
    summary: dict[str, Any] = {"questions": len(timings), "each": [asdict(t) for t in timings]}
    for name in ("rule_text_s", "first_token_s", "full_s"):
        values = [v for t in timings if (v := getattr(t, name)) is not None]
        summary[name] = {
            "n": len(values),
            "p50": _round(percentile(values, 50)),
            "p95": _round(percentile(values, 95)),
        }
    return summary


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def run(limit: int, gold: Path, backend: str | None) -> dict[str, Any]:
    # This copy of the code, as `rules` would run it, whatever is installed.
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    if backend:
        env["RULEKEEPER_GENERATION__BACKEND"] = backend
    items = [(i.question, i.game) for i in load_gold(gold) if i.game][:limit]
    was_running = json.loads(_rules(env, "service", "status", "--json"))["running"]
    results: dict[str, Any] = {}
    results["cold"] = _summary([_ask(env, q, g, "--no-daemon") for q, g in items])
    _rules(env, "service", "start")
    _ask(env, WARM_UP, items[0][1])
    results["warm_service"] = _summary([_ask(env, q, g) for q, g in items])
    status = json.loads(_rules(env, "service", "status", "--json"))
    results["service_memory_mb"] = status.get("memory_mb")
    if not was_running:
        _rules(env, "service", "stop")
    results["chat"] = _summary(_chat(env, items))
    return results


def _print(results: dict[str, Any]) -> None:
    print(f"{'mode':<14}{'n':>4}  {'rule text p50/p95':>18}  {'first token p50/p95':>20}  "
          f"{'full answer p50/p95':>20}")  # fmt: skip
    for mode in ("cold", "warm_service", "chat"):
        row = results[mode]
        cells = []
        for name in ("rule_text_s", "first_token_s", "full_s"):
            p50, p95 = row[name]["p50"], row[name]["p95"]
            cells.append("-" if p50 is None else f"{p50:.2f} / {p95:.2f} s")
        print(f"{mode:<14}{row['questions']:>4}  {cells[0]:>18}  {cells[1]:>20}  {cells[2]:>20}")
    print(f"service resident memory: {results['service_memory_mb']} MB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=20, help="Questions asked per mode.")
    parser.add_argument("--gold", type=Path, default=DEFAULT_GOLD)
    parser.add_argument("--backend", choices=["auto", "llama", "extractive"], default=None)
    parser.add_argument("--json", action="store_true", help="Print the results as JSON.")
    args = parser.parse_args(argv)
    results = run(args.limit, args.gold, args.backend)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
