"""Finding, starting and stopping the warm local service (api/warm_service.py) from a
`rules` command. Services are found in the process table (api.local_state), so none is lost
track of; every wait is bounded; a service that is gone, hung, unrecorded, of another version
or started under other settings is stopped, and what cannot be recovered is answered here.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Literal

from api.local_state import (
    LOCK_FILE,
    LOG_FILE,
    ServiceState,
    read_state,
    recorded_pids,
    remove_state,
    rulekeeper_version,
    service_command,
    service_home,
    service_pids,
    settings_fingerprint,
)
from cli.ui import Ui
from rag.settings import Settings

Readiness = Literal["ready", "loading", "failed", "unreachable"]
_POLL_S = 0.05
_STOP_GRACE_S = 10.0  # the service finishes the answer in flight, then exits
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


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
    """The services of one Rulekeeper home: at most one is kept, and none is lost track of."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.home = settings.home
        self.log_path = self.home / LOG_FILE

    def serves(self, pid: int) -> bool:
        """Whether `pid` is a running service of this home."""
        return service_home(pid) == self.home.resolve()

    def running(self) -> list[tuple[int, ServiceState | None]]:
        """Every service of this home, with its record (None: lost or garbled); records of
        processes that are not services of this home are removed."""
        pids = service_pids(self.home)
        for pid in set(recorded_pids(self.home)) - set(pids):
            remove_state(self.home, pid)
        return [(pid, read_state(self.home, pid)) for pid in pids]

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
        while time.monotonic() < deadline and self.serves(state.pid):
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

    def connect(self, ui: Ui) -> ServiceState | None:
        """The running service, once ready, when it is of this version and settings; None
        when there is none to use. Every other service of this home is stopped: one without
        a readable record could never be asked, and would hold its memory until idle."""
        if not service_pids(self.home):
            return None  # nothing to use or stop: no lock taken, nothing written
        usable = None
        with self._lock():
            for pid, state in self.running():
                if state is None:
                    ui.note(f"A Rulekeeper service (pid {pid}) has lost its record; stopping it.")
                elif usable is not None:
                    ui.note(f"A second Rulekeeper service (pid {pid}) was running; stopping it.")
                elif not self._current(state):
                    ui.note(
                        "The Rulekeeper service was started by another version or other settings."
                    )
                else:
                    usable = state
                    continue
                self.stop([pid])
        if usable is None:
            return None
        if self.wait_ready(usable, time.monotonic() + self.settings.service.start_timeout_s):
            return usable
        ui.note("The Rulekeeper service did not answer; stopping it.")
        self.stop([usable.pid], grace_s=0)  # hung or failed: nothing in flight is worth waiting for
        return None

    def _current(self, state: ServiceState) -> bool:
        return state.version == rulekeeper_version() and state.settings == settings_fingerprint(
            self.settings
        )

    def start(self, ui: Ui, *, wait: bool) -> ServiceState | None:
        """Start a service in the background, unless one of this home runs already; with
        `wait`, wait until it is ready and return it."""
        self.home.mkdir(parents=True, exist_ok=True)
        with self._lock() as lock:
            process = None if self.running() else self._spawn(ui, lock)
        if process is None:  # started by another command meanwhile
            return self.connect(ui) if wait else None
        if not wait:
            return None
        deadline = time.monotonic() + self.settings.service.start_timeout_s
        while time.monotonic() < deadline and process.poll() is None:
            state = read_state(self.home, process.pid)
            if state is not None:
                if self.wait_ready(state, deadline, starting=True):
                    return state
                break
            time.sleep(_POLL_S)
        if process.poll() is None:
            process.kill()
            process.wait()
        remove_state(self.home, process.pid)
        ui.note(f"The Rulekeeper service did not start (see {self.log_path}).")
        return None

    def _spawn(self, ui: Ui, lock: IO[str]) -> subprocess.Popen[bytes]:
        ui.note(
            "Starting the Rulekeeper service in the background, so that the next "
            "questions are answered warm (`rules service stop` stops it)."
        )
        with self.log_path.open("ab") as log:
            # The service holds this lock until it has recorded itself: until then, a
            # command looking for services would take it for one that lost its record.
            return subprocess.Popen(
                service_command(self.home, lock.fileno()),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(lock.fileno(),),
                cwd=self.home,  # never a checkout's code, whatever the caller's directory
                start_new_session=True,  # outlives this command and its terminal
                env=_service_env(),
            )

    def stop(self, pids: list[int], *, grace_s: float = _STOP_GRACE_S) -> None:
        """Stop these services of this home (SIGTERM, then SIGKILL for any that linger) and
        forget them; a pid that is not one is never signalled."""
        for pid in pids:
            if self.serves(pid):
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(self.serves(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        for pid in pids:
            if self.serves(pid):
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            remove_state(self.home, pid)

    @contextmanager
    def _lock(self) -> Iterator[IO[str]]:
        self.home.mkdir(parents=True, exist_ok=True)
        with (self.home / LOCK_FILE).open("w") as lock:
            # Held by another command while it stops services (at most their grace), or by a
            # starting service until it is recorded.
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield lock


def _service_env() -> dict[str, str]:
    """This environment (the same RULEKEEPER_* settings), importing this copy of the code."""
    paths = [str(_PACKAGE_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
