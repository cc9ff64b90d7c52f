"""`rules` as a real process: piped output, `ask --json` with a real embedder, and `chat`
driven through a pseudo-terminal the way a person types at it."""

from __future__ import annotations

import codecs
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.local_state import LOG_FILE

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-9A-Z]|\r")


def _env(home: Path, **settings: str) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RULEKEEPER_")}
    return {**env, "RULEKEEPER_HOME": str(home), **settings}


def _rules(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The installed command, run from the user's home rather than the repository, so it
    finds its package data the way an installed `rules` does."""
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=env["RULEKEEPER_HOME"], env=env, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip


def test_piped_output_is_plain_and_usage_errors_exit_2(tmp_path: Path) -> None:
    env = _env(tmp_path)
    shown = _rules("config", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "[retrieval]" in shown.stdout
    usage = _rules("ask", env=env)
    assert usage.returncode == 2 and usage.stdout == ""


@pytest.mark.real_models
def test_ask_json_with_a_real_embedder(tmp_path: Path) -> None:
    env = _env(
        tmp_path,
        RULEKEEPER_GENERATION__BACKEND="extractive",
        RULEKEEPER_EMBEDDING__MODEL="all-minilm-l6-v2",
    )
    try:  # as a user runs it: through the local service it starts
        run = _rules("ask", "How many actions do I take on my turn?", "--game", "MaxApoc", "--json",
                     env=env)  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert "Traceback" not in run.stderr
        # Busy loading its models, the service it started must not be taken for hung.
        assert "did not start" not in run.stderr, (tmp_path / LOG_FILE).read_text()
        data = json.loads(run.stdout)  # the whole of stdout is the one object
        assert set(data) >= {"question", "game", "lang", "answer", "abstained", "citations",
                             "passages", "timings"}  # fmt: skip
        assert data["game"] == "maximum-apocalypse" and data["backend"] == "extractive"
        assert data["citations"] and not data["abstained"]
        passages = {p["chunk_id"] for p in data["passages"]}
        assert all(c["chunk_id"] in passages for c in data["citations"])
        assert "4 actions" in " ".join(p["text"] for p in data["passages"]).lower() or any(
            "Player Actions" in p["section"] for p in data["passages"]
        )

        unknown = _rules("ask", "How do I move?", "--game", "chess", "--json", env=env)
        assert unknown.returncode == 1 and unknown.stdout == ""
        assert unknown.stderr.startswith("Error: Unknown game 'chess'")
        assert len(unknown.stderr.strip().splitlines()) == 1
    finally:  # which would otherwise outlive the test by its idle timeout
        _rules("service", "stop", env=env)


# --- chat on a pseudo-terminal ----------------------------------------------------------------

# The child runs the real CLI with conftest's fake embedder, so no model is loaded.
_CHAT_DRIVER = """
import sys
sys.path[:0] = [{root!r}, {tests!r}]
from conftest import FakeEmbedder, on_fake_scale
from cli.main import app
from cli.state import CliState
from rag.generation import ExtractiveGenerator
from rag.pipeline import Pipeline
from rag.settings import load_settings

state = CliState(lambda: Pipeline(on_fake_scale(load_settings()), embedder=FakeEmbedder(),
                                  generator=ExtractiveGenerator()))
app(["chat", *sys.argv[1:]], obj=state, prog_name="rules")
"""


class Terminal:
    """A child process on a pseudo-terminal: type keys at it, read back its screen text."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: exec at once, before touching anything of pytest's
            try:
                os.chdir(ROOT)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._raw = ""
        self._read_to = 0  # expect() looks only past what earlier expects matched

    @property
    def screen(self) -> str:
        return _ANSI.sub("", self._raw)

    def send(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def expect(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while (found := self.screen.find(text, self._read_to)) < 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._read(remaining):
                raise AssertionError(f"{text!r} never shown. Screen:\n{self.screen}")
        seen = self.screen[self._read_to : found + len(text)]
        self._read_to = found + len(text)
        return seen

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child has closed the terminal
            return False
        self._raw += self._decoder.decode(data)
        return bool(data)

    def exit_code(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._read(0.05)  # keep draining, or a child blocked on output never exits
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
        raise AssertionError(f"still running. Screen:\n{self.screen}")

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass  # already exited and reaped
        os.close(self.fd)


@pytest.fixture
def chat_terminal(tmp_path: Path) -> Iterator[Terminal]:
    driver = _CHAT_DRIVER.format(root=str(ROOT), tests=str(TESTS))
    terminal = Terminal([sys.executable, "-c", driver], _env(tmp_path, TERM="xterm"))
    yield terminal
    terminal.close()


def test_chat_on_a_terminal_keeps_the_game_switches_and_exits_cleanly(
    chat_terminal: Terminal, tmp_path: Path
) -> None:
    t = chat_terminal
    t.expect("rules> ")
    t.send("How does a stealth test work in Maximum Apocalypse?\r")
    assert "Stealth" in t.expect("Sources (maximum-apocalypse)")
    t.expect("maximum-apocalypse> ")

    t.send("and if I'm starving?\r")  # names no game: the conversation's game answers
    t.expect("Sources (maximum-apocalypse)")
    t.expect("maximum-apocalypse> ")

    t.send("half a line")
    t.expect("half a line")  # typed into the prompt (keys sent sooner may beat its set-up)
    t.send("\x03")  # Ctrl-C at the prompt drops the line, not the session
    t.expect("maximum-apocalypse> ")

    t.send("/game suros\r")
    t.expect("Now answering about Suros (suros).")
    t.expect("suros> ")
    t.send("how do zones work?\r")
    t.expect("Sources (suros)")
    t.expect("suros> ")

    t.send("\x04")  # Ctrl-D
    assert t.exit_code() == 0
    assert "Traceback" not in t.screen
    history = (tmp_path / "chat_history").read_text(encoding="utf-8")
    assert "/game suros" in history and "and if I'm starving?" in history
