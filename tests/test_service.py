"""The warm local service as a user meets it: the real `rules` command in a process, talking
to a real service process it started. Both build conftest's fake pipeline (the setting
pipeline_factory), so no model loads and answers come in milliseconds."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.local_state import ServiceState, read_state, state_path
from cli.service_client import ServiceClient
from cli.service_process import LocalService, Readiness, is_service_process
from cli.ui import Ui
from rag.pipeline import Pipeline
from rag.settings import Settings
from rag.types import StreamEvent, Turn

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
QUESTION = "How does a stealth test work?"
STARTING = "Starting the Rulekeeper service"
# Model libraries a light command must not import (they take seconds to load).
HEAVY = ("torch", "sentence_transformers", "transformers", "llama_cpp", "faiss")


def service_env(home: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RULEKEEPER_")}
    return {
        **env,
        # This copy of the code, and conftest (the fake pipeline), whatever the directory.
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]),
        "RULEKEEPER_HOME": str(home),
        "RULEKEEPER_PIPELINE_FACTORY": "conftest:fake_pipeline",
        "RULEKEEPER_RETRIEVAL__GAME_MARGIN": "2.0",
        "RULEKEEPER_SERVICE__IDLE_TIMEOUT_S": "120",  # a service a failed test leaves goes
        "RULEKEEPER_SERVICE__CONNECT_TIMEOUT_S": "1",
        "RULEKEEPER_SERVICE__START_TIMEOUT_S": "60",
        **settings,
    }


def rules(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=env["RULEKEEPER_HOME"], env=env, input=stdin, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def ok(run: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    return run


def recorded(home: Path) -> ServiceState:
    state = read_state(home)
    assert state is not None, "no service recorded"
    return state


def wait_gone(pid: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while is_service_process(pid):
        assert time.monotonic() < deadline, f"service {pid} still running"
        time.sleep(0.05)


def without_timings(output: str) -> str:
    """Plain output with the one line that differs run to run ("Answered by … in 0.01 s.")."""
    return "\n".join(line for line in output.splitlines() if not line.startswith("Answered by"))


@pytest.fixture(scope="module")
def built_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake embedder's index, built once and copied into each test's home."""
    home = tmp_path_factory.mktemp("index-home")
    ok(rules(service_env(home), "index"))
    return home / "index"


@pytest.fixture
def env(tmp_path: Path, built_index: Path) -> Iterator[dict[str, str]]:
    home = tmp_path / "home"
    shutil.copytree(built_index, home / "index")
    yield service_env(home)
    state = read_state(home)
    if state is not None and is_service_process(state.pid):
        os.kill(state.pid, signal.SIGKILL)


@pytest.mark.slow
def test_ask_starts_the_service_once_and_answers_as_in_process(env: dict[str, str]) -> None:
    home = Path(env["RULEKEEPER_HOME"])
    first = ok(rules(env, "ask", QUESTION, "--game", "MaxApoc"))
    assert first.stderr.count(STARTING) == 1
    state = recorded(home)
    assert is_service_process(state.pid)
    assert stat.S_IMODE(state_path(home).stat().st_mode) == 0o600  # the token is the user's

    warm = ok(rules(env, "ask", QUESTION, "--game", "MaxApoc"))
    assert STARTING not in warm.stderr and recorded(home).pid == state.pid
    here = ok(rules(env, "ask", QUESTION, "--game", "MaxApoc", "--no-daemon"))
    assert "Deciding rule:" in warm.stdout and "Sources (maximum-apocalypse)" in warm.stdout
    assert without_timings(warm.stdout) == without_timings(here.stdout)
    assert without_timings(first.stdout) == without_timings(here.stdout)

    served = json.loads(ok(rules(env, "ask", QUESTION, "--game", "MaxApoc", "--json")).stdout)
    local = json.loads(
        ok(rules(env, "ask", QUESTION, "--game", "MaxApoc", "--json", "--no-daemon")).stdout
    )
    assert list(served) == list(local)  # the same keys in the same order
    assert served.pop("timings").keys() == local.pop("timings").keys()
    assert served == local

    for command in (
        ["games"],
        ["show", "suros"],
        ["show", "suros", "starting gear"],
        ["show", "maximum-apocalypse", "7"],
    ):
        through = ok(rules(env, *command))
        assert through.stdout == ok(rules(env, *command, "--no-daemon")).stdout, command

    chat = "How does a stealth test work in Maximum Apocalypse?\nand if I'm starving?\n"
    chat += "/game suros\nhow do zones work?\n/games\n"
    through = ok(rules(env, "chat", stdin=chat))
    local_chat = ok(rules(env, "chat", "--no-daemon", stdin=chat))
    assert "Sources (suros)" in through.stdout
    assert without_timings(through.stdout) == without_timings(local_chat.stdout)
    assert recorded(home).pid == state.pid  # every command used the one service


@pytest.mark.slow
def test_errors_through_the_service_are_the_in_process_ones(env: dict[str, str]) -> None:
    ok(rules(env, "service", "start"))
    for args in (["ask", QUESTION, "--game", "chess"], ["ask", "  "], ["show", "chess"]):
        through = rules(env, *args)
        here = rules(env, *args, "--no-daemon")
        assert (through.returncode, through.stdout) == (here.returncode, here.stdout), args
        assert through.returncode == 1 and through.stderr == here.stderr, args


@pytest.mark.slow
def test_a_killed_or_hung_service_is_replaced(env: dict[str, str]) -> None:
    home = Path(env["RULEKEEPER_HOME"])
    ok(rules(env, "ask", QUESTION, "--game", "suros"))
    crashed = recorded(home)
    os.kill(crashed.pid, signal.SIGKILL)
    wait_gone(crashed.pid)
    assert read_state(home) == crashed  # a crash leaves its record behind

    after_crash = ok(rules(env, "ask", QUESTION, "--game", "suros"))
    assert STARTING in after_crash.stderr and "Deciding rule:" in after_crash.stdout
    hung = recorded(home)
    assert hung.pid != crashed.pid

    os.kill(hung.pid, signal.SIGSTOP)  # accepts connections, never answers
    started = time.monotonic()
    after_hang = ok(rules(env, "ask", QUESTION, "--game", "suros"))
    assert time.monotonic() - started < 30  # bounded: connect timeout, then a new service
    assert "did not answer" in after_hang.stderr and STARTING in after_hang.stderr
    wait_gone(hung.pid)
    assert recorded(home).pid not in (crashed.pid, hung.pid)


@pytest.mark.slow
def test_stale_or_broken_state_files_are_recovered(env: dict[str, str]) -> None:
    home = Path(env["RULEKEEPER_HOME"])
    path = state_path(home)
    path.write_text("{not json", encoding="utf-8")
    assert "Deciding rule:" in ok(rules(env, "ask", QUESTION, "--game", "suros")).stdout
    ok(rules(env, "service", "stop"))
    assert not path.exists()

    # A recorded pid now used by another process (here: this test) is never signalled.
    stale = ServiceState(pid=os.getpid(), port=1, token="t", version="0", settings="s")
    path.write_text(json.dumps(stale.__dict__), encoding="utf-8")
    status = ok(rules(env, "service", "status", "--json"))
    assert json.loads(status.stdout)["running"] is False and not path.exists()
    path.write_text(json.dumps(stale.__dict__), encoding="utf-8")
    run = ok(rules(env, "ask", QUESTION, "--game", "suros"))
    assert STARTING in run.stderr and recorded(home).pid != os.getpid()


@pytest.mark.slow
def test_another_version_is_replaced(env: dict[str, str]) -> None:
    home = Path(env["RULEKEEPER_HOME"])
    ok(rules(env, "service", "start"))
    old = recorded(home)
    # As an upgrade leaves it: the running service is of the version installed before.
    state_path(home).write_text(json.dumps({**old.__dict__, "version": "0.0.1"}), "utf-8")
    run = ok(rules(env, "ask", QUESTION, "--game", "suros"))
    assert "another version" in run.stderr and STARTING in run.stderr
    wait_gone(old.pid)
    new = recorded(home)
    assert new.pid != old.pid and new.version != "0.0.1"

    # Other settings (here another k) would answer differently: also replaced.
    other = ok(rules({**env, "RULEKEEPER_RETRIEVAL__K": "3"}, "ask", QUESTION, "-g", "suros"))
    assert "other settings" in other.stderr and recorded(home).pid != new.pid


@pytest.mark.slow
def test_an_idle_service_stops_itself(env: dict[str, str]) -> None:
    idle = {**env, "RULEKEEPER_SERVICE__IDLE_TIMEOUT_S": "1.5"}
    home = Path(env["RULEKEEPER_HOME"])
    ok(rules(idle, "service", "start"))
    state = recorded(home)
    wait_gone(state.pid, timeout=20)
    assert read_state(home) is None  # it forgot itself on the way out
    assert "not running" in ok(rules(idle, "service", "status")).stdout


@pytest.mark.slow
def test_a_service_that_cannot_start_in_time_leaves_the_answer_to_this_process(
    env: dict[str, str],
) -> None:
    slow = {**env, "RULEKEEPER_SERVICE__START_TIMEOUT_S": "0.05"}
    run = ok(rules(slow, "ask", QUESTION, "--game", "suros"))
    assert "did not start" in run.stderr and "answering here" in run.stderr
    assert "Deciding rule:" in run.stdout and "Answered by scripted" in run.stdout
    assert read_state(Path(env["RULEKEEPER_HOME"])) is None


@pytest.mark.slow
def test_only_the_token_holder_is_answered(env: dict[str, str]) -> None:
    ok(rules(env, "service", "start"))
    state = recorded(Path(env["RULEKEEPER_HOME"]))
    assert state.url.startswith("http://127.0.0.1:")
    body = {"question": QUESTION, "game": "suros"}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"X-API-Key": state.token[:-1]}):
        refused = httpx.post(f"{state.url}/v1/ask", json=body, headers=headers, timeout=10)
        assert refused.status_code == 401, headers
        assert httpx.get(f"{state.url}/v1/games", headers=headers, timeout=10).status_code == 401
    allowed = {"Authorization": f"Bearer {state.token}"}
    assert httpx.post(f"{state.url}/v1/ask", json=body, headers=allowed, timeout=10).is_success


_IMPORTS_DRIVER = """
import json, sys
from cli.main import app
try:
    app(sys.argv[2:], prog_name="rules")
except SystemExit:
    pass
with open(sys.argv[1], "w") as out:
    json.dump(sorted(sys.modules), out)
"""


@pytest.mark.slow
def test_light_commands_load_no_model_library(env: dict[str, str], tmp_path: Path) -> None:
    ok(rules(env, "service", "start"))  # `games` and `show` ask it, as when it runs
    listing = tmp_path / "modules.json"
    for command in (
        ["--help"],
        ["config"],
        ["service", "status"],
        ["games"],
        ["show", "suros"],
        ["show", "suros", "2"],
    ):
        run = subprocess.run(
            [sys.executable, "-c", _IMPORTS_DRIVER, str(listing), *command],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert "Traceback" not in run.stderr and run.stdout, (command, run.stderr)
        loaded = {name.split(".")[0] for name in json.loads(listing.read_text())}
        assert not loaded & set(HEAVY), command
    # In this process too: a current index is read without its vectors. (The driver sees
    # what the command loaded: the fake pipeline's conftest, so the pipeline was built.)
    for command in (["games", "--no-daemon"], ["show", "suros", "2", "--no-daemon"]):
        run = subprocess.run(
            [sys.executable, "-c", _IMPORTS_DRIVER, str(listing), *command],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        modules = json.loads(listing.read_text())
        assert "conftest" in modules and run.stdout, run.stderr
        assert not {name.split(".")[0] for name in modules} & set(HEAVY), command


# --- the client against a service in this process ----------------------------------------


def _events(events: Iterator[StreamEvent]) -> list[tuple[str, str, Any]]:
    """Each event's kind, text and payload (quotes, or the answer's JSON less its timings)."""
    seen = []
    for event in events:
        payload: Any = list(event.quotes)
        if event.answer is not None:
            payload = {**event.answer.to_json(), "timings": None}
        seen.append((event.kind, event.text, payload))
    return seen


def test_the_client_yields_the_pipelines_stream_events(
    serve_api: Any, scripted_pipeline: Pipeline
) -> None:
    token = "local-token"
    url = serve_api(scripted_pipeline, api_keys=[token])
    port = int(url.rsplit(":", 1)[1])
    state = ServiceState(pid=os.getpid(), port=port, token=token, version="dev", settings="")

    def unused() -> Pipeline:
        raise AssertionError("the service answered: nothing falls back to this process")

    client = ServiceClient(state, scripted_pipeline.settings, Ui(), unused)
    turns = [Turn("How does a stealth test work in Maximum Apocalypse?", "", "maximum-apocalypse")]
    served = _events(client.ask_stream("and if I'm starving?", None, 3, turns))
    here = _events(scripted_pipeline.ask_stream("and if I'm starving?", None, 3, turns))
    assert [kind for kind, _, _ in served] == [kind for kind, _, _ in here]
    assert {"quotes", "token", "answer"} <= {kind for kind, _, _ in served}
    assert served == here
    assert client.chunks("suros") == scripted_pipeline.chunks("suros")
    assert client.games() == scripted_pipeline.games()


# --- waiting for readiness, with a scripted service -------------------------------------------


class ScriptedReadiness(LocalService):
    """A live service whose /readyz answers follow a script, one answer per poll; the clock
    moves a second per poll, so the connect timeout (1 s here) means two silent polls."""

    def __init__(self, settings: Settings, answers: list[Readiness]) -> None:
        super().__init__(settings)
        self.answers = answers
        self.polls = 0

    def readiness(self, state: ServiceState) -> Readiness:
        self.polls += 1
        return self.answers.pop(0) if self.answers else "unreachable"


@pytest.fixture
def ticking(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(10_000))
    monkeypatch.setattr("cli.service_process.time.monotonic", lambda: float(next(clock)))
    monkeypatch.setattr("cli.service_process.time.sleep", lambda _: None)
    monkeypatch.setattr("cli.service_process.is_service_process", lambda _: True)


@pytest.mark.usefixtures("ticking")
def test_a_service_silent_while_loading_its_models_is_waited_for(settings: Settings) -> None:
    timeouts = settings.service.model_copy(update={"connect_timeout_s": 1.0})
    settings = settings.model_copy(update={"service": timeouts})
    state = ServiceState(pid=1, port=1, token="t", version="v", settings="s")
    silent_then_ready: list[Readiness] = ["unreachable"] * 5 + ["ready"]

    found = ScriptedReadiness(settings, list(silent_then_ready))
    assert not found.wait_ready(state, deadline=1_000)  # a found service silent this long: hung
    assert found.polls < 5

    started = ScriptedReadiness(settings, list(silent_then_ready))
    assert started.wait_ready(state, deadline=1_000, starting=True)  # one just started: loading

    loading = ScriptedReadiness(settings, ["loading", *silent_then_ready])
    assert loading.wait_ready(state, deadline=1_000)  # it said it loads: busy, not hung

    never = ScriptedReadiness(settings, [])
    assert not never.wait_ready(state, deadline=50, starting=True)  # bounded by the deadline
