"""Where a `rules` command finds its user's warm local service: a state file under the
Rulekeeper home holding the service's port, pid, version and token (mode 0600, so other
local users can neither read the token nor use the service).

Light on purpose: `rules` imports it before deciding whether to load any model.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rag.settings import Settings

STATE_FILE = "service.json"
LOG_FILE = "service.log"
LOCK_FILE = "service.lock"
SERVICE_MODULE = "api.warm_service"  # `python -m` runs it; also how its process is recognised
HOST = "127.0.0.1"


def rulekeeper_version() -> str:
    try:
        return version("rulekeeper")
    except PackageNotFoundError:
        return "dev"


def settings_fingerprint(settings: Settings) -> str:
    """Differs when any setting does: a service started under other settings (another
    backend, model or config file) would answer differently, so it is replaced."""
    return hashlib.sha256(settings.model_dump_json().encode()).hexdigest()[:16]


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


def state_path(home: Path) -> Path:
    return home / STATE_FILE


def read_state(home: Path) -> ServiceState | None:
    """The recorded service, or None when there is none (or the file is unreadable, as a
    crash while writing it would leave it)."""
    try:
        return ServiceState(**json.loads(state_path(home).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def write_state(home: Path, state: ServiceState) -> None:
    """Written whole (a reader never sees half of it) and readable by this user only."""
    home.mkdir(parents=True, exist_ok=True)
    partial = home / f".{STATE_FILE}.{state.pid}"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        os.fchmod(fd, 0o600)  # a leftover file keeps its old mode through O_CREAT
        json.dump(asdict(state), out)
    os.replace(partial, state_path(home))


def remove_state(home: Path, pid: int) -> None:
    """Forget the service `pid`; a newer service's file is left alone."""
    current = read_state(home)
    if current is None or current.pid == pid:
        state_path(home).unlink(missing_ok=True)
