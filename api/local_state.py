"""Where a `rules` command finds its user's warm local services.

The process table is what says which services run: a service is started with a command line
naming its module and its Rulekeeper home (`service_command`), so every service of a home is
found (`service_pids`) whatever became of the files. Beside it, each service records its
port, version and token in a file of its own, `HOME/services/PID.json` (mode 0600, so other
local users can neither read the token nor use the service). A record is believed only for
the process it names when that process is a service of this home: a lost, garbled or stale
record can hide no service and make no other process be signalled.

Light on purpose: `rules` imports it before deciding whether to load any model.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rag.settings import Settings

SERVICES_DIR = "services"
LOG_FILE = "service.log"
LOCK_FILE = "service.lock"
SERVICE_MODULE = "api.warm_service"  # `python -m` runs it
HOME_OPTION = "--home"  # on the service's command line: how its process is told apart
LOCK_FD_OPTION = "--lock-fd"  # the starter's lock, held by the service until it is recorded
HOST = "127.0.0.1"
# Settings only the `rules` command reads: a service started under other values of these
# answers exactly the same, so it is not replaced for them.
_CLIENT_SETTINGS = {"service": {"enabled", "connect_timeout_s", "start_timeout_s"}}


def rulekeeper_version() -> str:
    try:
        return version("rulekeeper")
    except PackageNotFoundError:
        return "dev"


def settings_fingerprint(settings: Settings) -> str:
    """Differs when any setting the service answers by does: a service started under other
    settings (another backend, model or config file) would answer differently, so it is
    replaced."""
    dumped = settings.model_dump_json(exclude=_CLIENT_SETTINGS)
    return hashlib.sha256(dumped.encode()).hexdigest()[:16]


def service_command(home: Path, lock_fd: int | None = None) -> list[str]:
    """How a service of `home` is started. `-P`: the service imports the code installed beside
    this one (PYTHONPATH), never a checkout in the working directory."""
    command = [sys.executable, "-P", "-m", SERVICE_MODULE, HOME_OPTION, str(home.resolve())]
    return command + ([LOCK_FD_OPTION, str(lock_fd)] if lock_fd is not None else [])


def service_home(pid: int) -> Path | None:
    """The home the process `pid` serves, when it is a service of this user; else None (a
    recorded pid may since have been given to another process, which must never be
    signalled). Without /proc nothing is recognised: records are then dropped, never acted
    on."""
    proc = Path(f"/proc/{pid}")
    try:
        if proc.stat().st_uid != os.getuid():
            return None
        args = proc.joinpath("cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    if SERVICE_MODULE not in args or HOME_OPTION not in args[:-1]:
        return None
    return Path(args[args.index(HOME_OPTION) + 1])


def service_pids(home: Path) -> list[int]:
    """Every running service of `home`, from the process table."""
    wanted = home.resolve()
    try:
        pids = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
    except OSError:
        return []
    return [pid for pid in pids if service_home(pid) == wanted]


@dataclass(frozen=True)
class ServiceState:
    pid: int
    port: int
    token: str
    version: str
    settings: str  # settings_fingerprint of the settings it was started with
    started_at: float = field(default_factory=time.time)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


def services_dir(home: Path) -> Path:
    return home / SERVICES_DIR


def record_path(home: Path, pid: int) -> Path:
    return services_dir(home) / f"{pid}.json"


def recorded_pids(home: Path) -> list[int]:
    """The pids the home's records are named after (whether or not those processes run)."""
    try:
        names = [path.stem for path in services_dir(home).glob("*.json")]
    except OSError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


def read_state(home: Path, pid: int) -> ServiceState | None:
    """The service `pid`'s record, or None when there is none or it does not read as that
    service's (garbled, or naming another pid)."""
    try:
        state = ServiceState(**json.loads(record_path(home, pid).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None
    return state if state.pid == pid else None


def write_state(home: Path, state: ServiceState) -> None:
    """Written whole (a reader never sees half of it) and readable by this user only."""
    folder = services_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{state.pid}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        os.fchmod(fd, 0o600)  # a leftover file keeps its old mode through O_CREAT
        json.dump(asdict(state), out)
    os.replace(partial, record_path(home, state.pid))


def remove_state(home: Path, pid: int) -> None:
    record_path(home, pid).unlink(missing_ok=True)
