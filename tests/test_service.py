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
from conftest import FakeEmbedder, ScriptedGenerator, on_fake_scale

from api.local_state import (
    ServiceState,
    read_state,
    record_path,
    service_command,
    service_home,
    service_pids,
    services_dir,
    write_state,
)
from cli.service_client import ServiceClient
from cli.service_process import LocalService, Readiness
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
    env: dict[str, str], *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The command as the installed `rules` script runs it: `-P`, so that the code imported
    is never the working directory's."""
    return subprocess.run(
        [sys.executable, "-P", "-m", "cli.main", *args],
        cwd=cwd or env["RULEKEEPER_HOME"], env=env, input=stdin, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip


def ok(run: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    return run


def recorded(home: Path, timeout: float = 30) -> ServiceState:
    """The one service of `home`, once it has recorded itself (a command that answered in
    its own process starts it on the way out)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = service_pids(home)
        states = [read_state(home, pid) for pid in pids]
        if len(pids) == 1 and states[0] is not None:
            return states[0]
        assert time.monotonic() < deadline, f"services {pids}, records {states}"
        time.sleep(0.05)


def wait_gone(pid: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while service_home(pid) is not None:
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
    for pid in service_pids(home):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_ask_starts_the_service_once_and_answers_as_in_process(env: dict[str, str]) -> None:
    home = Path(env["RULEKEEPER_HOME"])
    first = ok(rules(env, "ask", QUESTION, "--game", "MaxApoc"))
    assert first.stderr.count(STARTING) == 1
    state = recorded(home)
    # The token is the user's.
    assert stat.S_IMODE(record_path(home, state.pid).stat().st_mode) == 0o600

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
    ok(rules(env, "service", "start"))
    crashed = recorded(home)
    os.kill(crashed.pid, signal.SIGKILL)
    wait_gone(crashed.pid)
    assert read_state(home, crashed.pid) == crashed  # a crash leaves its record behind

    after_crash = ok(rules(env, "ask", QUESTION, "--game", "suros"))
    assert STARTING in after_crash.stderr and "Deciding rule:" in after_crash.stdout
    assert not record_path(home, crashed.pid).exists()
    hung = recorded(home)
    assert hung.pid != crashed.pid

    os.kill(hung.pid, signal.SIGSTOP)  # accepts connections, never answers
    started = time.monotonic()
    after_hang = ok(rules(env, "ask", QUESTION, "--game", "suros"))
    assert time.monotonic() - started < 30  # bounded: connect timeout, then answered here
    assert "did not answer" in after_hang.stderr and STARTING in after_hang.stderr
    assert "Deciding rule:" in after_hang.stdout
    wait_gone(hung.pid)
    assert recorded(home).pid not in (crashed.pid, hung.pid)


@pytest.mark.slow
def test_a_clobbered_or_lost_record_leaves_no_service_behind(env: dict[str, str]) -> None:
    home = Path(env["RULEKEEPER_HOME"])
    ok(rules(env, "service", "start"))
    garbled = recorded(home)
    record_path(home, garbled.pid).write_text("{not json", encoding="utf-8")
    run = ok(rules(env, "ask", QUESTION, "--game", "suros"))
    assert f"(pid {garbled.pid}) has lost its record; stopping it" in run.stderr
    assert "Deciding rule:" in run.stdout and STARTING in run.stderr
    wait_gone(garbled.pid)

    lost = recorded(home)
    shutil.rmtree(services_dir(home))  # every record gone: the service is still found
    status = json.loads(ok(rules(env, "service", "status", "--json")).stdout)
    assert status["running"] and [s["pid"] for s in status["services"]] == [lost.pid]
    assert status["status"] == "unrecorded"
    assert "Stopped the Rulekeeper service" in ok(rules(env, "service", "stop")).stdout
    wait_gone(lost.pid)
    assert service_pids(home) == []

    # A record naming another process (here: this test) is never signalled, and is dropped.
    write_state(home, ServiceState(pid=os.getpid(), port=1, token="t", version="0", settings="s"))
    status = json.loads(ok(rules(env, "service", "status", "--json")).stdout)
    assert status["running"] is False and not record_path(home, os.getpid()).exists()


@pytest.mark.slow
def test_stop_stops_every_service_of_this_home_and_only_those(
    env: dict[str, str], tmp_path: Path
) -> None:
    home = Path(env["RULEKEEPER_HOME"])
    other = service_env(tmp_path / "other-home")
    shutil.copytree(home / "index", tmp_path / "other-home" / "index")
    ok(rules(other, "service", "start"))
    neighbour = recorded(tmp_path / "other-home")
    ok(rules(env, "service", "start"))
    # A second service of this home, as a command of an older version could have left.
    second = subprocess.Popen(
        service_command(home), cwd=home, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while read_state(home, second.pid) is None:
            assert time.monotonic() < deadline and second.poll() is None
            time.sleep(0.05)
        pids = service_pids(home)
        assert len(pids) == 2
        status = json.loads(ok(rules(env, "service", "status", "--json")).stdout)
        assert sorted(s["pid"] for s in status["services"]) == pids
        stopped = ok(rules(env, "service", "stop"))
        assert f"Stopped 2 Rulekeeper services (pids {pids[0]}, {pids[1]})." in stopped.stdout
        second.wait(timeout=15)
        for pid in pids:
            wait_gone(pid)
        assert service_home(neighbour.pid) == (tmp_path / "other-home").resolve()
    finally:
        second.kill()
        second.wait()
        ok(rules(other, "service", "stop"))


@pytest.mark.slow
def test_another_version_or_settings_are_replaced_but_not_client_settings(
    env: dict[str, str],
) -> None:
    home = Path(env["RULEKEEPER_HOME"])
    ok(rules(env, "service", "start"))
    old = recorded(home)
    # As an upgrade leaves it: the running service is of the version installed before.
    record_path(home, old.pid).write_text(json.dumps({**old.__dict__, "version": "0.0.1"}))
    run = ok(rules(env, "ask", QUESTION, "--game", "suros"))
    assert "another version" in run.stderr and STARTING in run.stderr
    wait_gone(old.pid)
    new = recorded(home)
    assert new.pid != old.pid and new.version != "0.0.1"

    # Other settings (here another k) would answer differently: also replaced.
    other_k = {**env, "RULEKEEPER_RETRIEVAL__K": "3"}
    other = ok(rules(other_k, "ask", QUESTION, "-g", "suros"))
    assert "other settings" in other.stderr
    wait_gone(new.pid)
    replaced = recorded(home)
    # How long the command waits for the service changes nothing it answers: kept.
    patient = {**other_k, "RULEKEEPER_SERVICE__CONNECT_TIMEOUT_S": "3"}
    kept = ok(rules(patient, "ask", QUESTION, "-g", "suros"))
    assert "other settings" not in kept.stderr and STARTING not in kept.stderr
    assert recorded(home).pid == replaced.pid


@pytest.mark.slow
def test_the_service_imports_its_own_code_from_inside_a_checkout(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Run from a directory holding another copy of the code, the service still imports
    the installed one: its settings match, and the next question finds it."""
    home = Path(env["RULEKEEPER_HOME"])
    checkout = tmp_path / "checkout"
    for package in ("api", "rag"):
        shutil.copytree(
            ROOT / package, checkout / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    first = ok(rules(env, "ask", QUESTION, "-g", "suros", cwd=checkout))
    assert STARTING in first.stderr
    state = recorded(home)
    again = ok(rules(env, "ask", QUESTION, "-g", "suros", cwd=checkout))
    assert "other settings" not in again.stderr and STARTING not in again.stderr
    assert recorded(home).pid == state.pid


@pytest.mark.slow
def test_an_idle_service_stops_itself(env: dict[str, str]) -> None:
    idle = {**env, "RULEKEEPER_SERVICE__IDLE_TIMEOUT_S": "1.5"}
    home = Path(env["RULEKEEPER_HOME"])
    ok(rules(idle, "service", "start"))
    state = recorded(home)
    wait_gone(state.pid, timeout=20)
    assert read_state(home, state.pid) is None  # it forgot itself on the way out
    assert "not running" in ok(rules(idle, "service", "status")).stdout


def readiness(state: ServiceState, timeout: float = 30) -> str:
    """What the service's /readyz says, once it listens (it records itself first)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return str(httpx.get(f"{state.url}/readyz", timeout=10).json()["status"])
        except httpx.ConnectError:
            assert time.monotonic() < deadline, "the service never listened"
            time.sleep(0.05)


class SlowWarmUp(ScriptedGenerator):
    """A model that takes minutes to load: the service never gets ready in a test."""

    def warm_up(self) -> None:
        time.sleep(600)


def slow_service_pipeline(settings: Settings) -> Pipeline:
    """The pipeline_factory of a service that is slow to load (only the service warms its
    model up: a command answering in its own process starts at once)."""
    return Pipeline(on_fake_scale(settings), embedder=FakeEmbedder(), generator=SlowWarmUp())


@pytest.mark.slow
def test_the_first_question_is_answered_here_while_the_service_loads(
    env: dict[str, str],
) -> None:
    home = Path(env["RULEKEEPER_HOME"])
    slow = {
        **env,
        "RULEKEEPER_PIPELINE_FACTORY": "test_service:slow_service_pipeline",
        "RULEKEEPER_SERVICE__START_TIMEOUT_S": "1",
    }
    first = ok(rules(slow, "ask", QUESTION, "--game", "suros"))
    assert "Deciding rule:" in first.stdout and "Answered by scripted" in first.stdout
    assert first.stderr.count(STARTING) == 1 and "did not" not in first.stderr
    loading = recorded(home)
    # Answered while the service it started was still loading: it waited for none of it.
    assert readiness(loading) == "loading"

    # One still loading past start_timeout_s is given up on, and the answer comes from here.
    second = ok(rules(slow, "ask", QUESTION, "--game", "suros"))
    assert "did not answer" in second.stderr and "Deciding rule:" in second.stdout
    wait_gone(loading.pid)


@pytest.mark.slow
def test_a_service_that_cannot_start_in_time_is_stopped(env: dict[str, str]) -> None:
    slow = {**env, "RULEKEEPER_SERVICE__START_TIMEOUT_S": "0.05"}
    run = rules(slow, "service", "start")
    assert run.returncode == 4 and "did not start" in run.stderr
    assert service_pids(Path(env["RULEKEEPER_HOME"])) == []


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
    monkeypatch.setattr(LocalService, "serves", lambda self, pid: True)


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
