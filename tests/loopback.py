"""Real servers started for a test on 127.0.0.1 and a free port, stopped after it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(**extra: str) -> dict[str, str]:
    """This environment, with the checkout and tests/ importable (conftest's fakes)."""
    paths = [str(PROJECT_ROOT), str(PROJECT_ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), **extra}


@contextmanager
def process(
    args: Sequence[str],
    ready: Callable[[], bool],
    *,
    log: Path,
    env: dict[str, str] | None = None,
    timeout_s: float = 60.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start `args`, wait until `ready()` holds; its output goes to `log`, shown on failure."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{args[0]} did not start (exit {proc.returncode}):\n{tail}")
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def accepts(port: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    return check


@contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """A throwaway redis-server (no persistence); its URL. Skips when it is not installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it with apt-get)")
    port = free_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
    args += ["no", "--dir", str(folder)]
    with process(args, accepts(port), log=folder / "redis.log"):
        yield f"redis://127.0.0.1:{port}/0"
