"""Finding, starting and stopping the warm local service (api/warm_service.py) from a
`rules` command. Every wait is bounded; a service that is gone, hung, of another version or
started under other settings is replaced, and what cannot be recovered is answered here.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from api.local_state import (
    LOCK_FILE,
    LOG_FILE,
    SERVICE_MODULE,
    ServiceState,
    read_state,
    remove_state,
    rulekeeper_version,
    settings_fingerprint,
    state_path,
)
from cli.ui import Ui
from rag.settings import Settings

Readiness = Literal["ready", "loading", "failed", "unreachable"]
_POLL_S = 0.05
_STOP_GRACE_S = 10.0  # the service finishes the answer in flight, then exits
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def is_service_process(pid: int) -> bool:
    """Whether `pid` runs the service: a recorded pid may since have been given to another
    process, which must never be signalled. (Without /proc nothing is recognised: stale
    records are then dropped, never acted on.)"""
    try:
        return SERVICE_MODULE.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def resident_bytes(pid: int) -> int | None:
    """The process's resident memory, where /proc tells it."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


class LocalService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.home = settings.home
        self.log_path = self.home / LOG_FILE

    def running(self) -> ServiceState | None:
        """The recorded service if its process is alive; a stale record is removed."""
        state = read_state(self.home)
        if state is None:
            state_path(self.home).unlink(missing_ok=True)  # unreadable: a crash mid-write
            return None
        if not is_service_process(state.pid):
            remove_state(self.home, state.pid)
            return None
        return state

    def readiness(self, state: ServiceState) -> Readiness:
        import httpx  # here: `rules --help` registers the service commands, and need not wait

        try:
            reply = httpx.get(
                f"{state.url}/readyz", timeout=self.settings.service.connect_timeout_s
            )
            status = reply.json()["status"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return "unreachable"
        return status if status in ("ready", "loading", "failed") else "unreachable"

    def wait_ready(self, state: ServiceState, deadline: float, *, starting: bool = False) -> bool:
        """Until the service has loaded its index; False when it failed, died, or did not
        answer for `connect_timeout_s` (hung, or the port is no longer its). A service that is
        `starting` or has said it is loading is waited for until the deadline: loading its
        models can keep it from answering for seconds (a cold disk in CI took over 2 s)."""
        answered_at = time.monotonic()
        patient = starting
        while time.monotonic() < deadline and is_service_process(state.pid):
            status = self.readiness(state)
            if status == "ready":
                return True
            if status == "failed":
                return False
            if status == "loading":
                answered_at = time.monotonic()
                patient = True
            elif (
                not patient
                and time.monotonic() - answered_at > self.settings.service.connect_timeout_s
            ):
                return False
            time.sleep(_POLL_S)
        return False

    def connect(self, ui: Ui, *, start: bool) -> ServiceState | None:
        """A ready service of this version and settings: the running one, else (`start`)
        a new one; None when there is none to use."""
        if not start:
            state = self._usable(ui)
            return state if state and self._ready_or_stopped(state, ui) else None
        with self._lock():  # two commands at once start one service, not two
            state = self._usable(ui)
            if state and self._ready_or_stopped(state, ui):
                return state
            return self.start(ui)

    def _usable(self, ui: Ui) -> ServiceState | None:
        state = self.running()
        if state is None:
            return None
        if state.version != rulekeeper_version() or state.settings != settings_fingerprint(
            self.settings
        ):
            ui.note("The Rulekeeper service was started by another version or other settings.")
            self.stop(state)
            return None
        return state

    def _ready_or_stopped(self, state: ServiceState, ui: Ui) -> bool:
        if self.wait_ready(state, time.monotonic() + self.settings.service.start_timeout_s):
            return True
        ui.note("The Rulekeeper service did not answer; stopping it.")
        self.stop(state, grace_s=0)  # hung or failed: nothing in flight is worth waiting for
        return False

    def start(self, ui: Ui) -> ServiceState | None:
        """Start a service in the background and wait until it is ready."""
        ui.note(
            "Starting the Rulekeeper service in the background, so that the next questions "
            "are answered warm (`rules service stop` stops it)."
        )
        self.home.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", SERVICE_MODULE],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # outlives this command and its terminal
                env=_service_env(),
            )
        deadline = time.monotonic() + self.settings.service.start_timeout_s
        while time.monotonic() < deadline and process.poll() is None:
            state = read_state(self.home)
            if state is not None and state.pid == process.pid:
                if self.wait_ready(state, deadline, starting=True):
                    return state
                break
            time.sleep(_POLL_S)
        if process.poll() is None:
            process.kill()
            process.wait()
        remove_state(self.home, process.pid)
        ui.note(f"The Rulekeeper service did not start (see {self.log_path}); answering here.")
        return None

    def stop(self, state: ServiceState, *, grace_s: float = _STOP_GRACE_S) -> None:
        """Stop the service (SIGTERM, then SIGKILL if it lingers) and forget it."""
        if is_service_process(state.pid):
            os.kill(state.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while is_service_process(state.pid) and time.monotonic() < deadline:
                time.sleep(_POLL_S)
            if is_service_process(state.pid):
                os.kill(state.pid, signal.SIGKILL)
        remove_state(self.home, state.pid)

    @contextmanager
    def _lock(self) -> Iterator[None]:
        self.home.mkdir(parents=True, exist_ok=True)
        with (self.home / LOCK_FILE).open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # held at most start_timeout_s by another command
            yield


def _service_env() -> dict[str, str]:
    """This environment (the same RULEKEEPER_* settings), importing this copy of the code
    whatever the working directory."""
    paths = [str(_PACKAGE_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
