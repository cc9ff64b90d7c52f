"""`rules service`: the warm local service behind `rules ask` (see cli.service_process)."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from api.local_state import ServiceState
from cli.errors import ExitCode
from cli.service_process import LocalService, resident_bytes
from cli.state import get_state
from cli.ui import Ui

app = typer.Typer(
    help="The warm local service that answers `rules ask`: see it, start it, stop it. It "
    "listens on 127.0.0.1 only, for your user only, and stops itself after "
    "service.idle_timeout_s without a question.",
    no_args_is_help=True,
)


def _service(ctx: typer.Context) -> tuple[LocalService, Ui]:
    state = get_state(ctx)
    return LocalService(state.settings), state.ui


def _report(service: LocalService, running: ServiceState | None) -> dict[str, Any]:
    if running is None:
        return {"running": False, "log": str(service.log_path)}
    rss = resident_bytes(running.pid)
    return {
        "running": True,
        "status": service.readiness(running),
        "url": running.url,
        "pid": running.pid,
        "version": running.version,
        "uptime_s": round(time.time() - running.started_at, 1),
        "memory_mb": None if rss is None else round(rss / 2**20, 1),
        "log": str(service.log_path),
    }


def _print_report(ui: Ui, report: dict[str, Any]) -> None:
    if not report["running"]:
        ui.text("The Rulekeeper service is not running; `rules ask` starts it.")
        return
    memory = "unknown" if report["memory_mb"] is None else f"{report['memory_mb']} MB"
    ui.text(
        f"The Rulekeeper service is {report['status']} at {report['url']} "
        f"(pid {report['pid']}, version {report['version']}, up {report['uptime_s']:.0f} s, "
        f"memory {memory})."
    )
    ui.note(f"Log: {report['log']}")


def status(
    ctx: typer.Context,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object and nothing else on stdout.")
    ] = False,
) -> None:
    """Whether the service runs: its address, process, version, state and memory."""
    service, ui = _service(ctx)
    report = _report(service, service.running())
    if as_json:
        typer.echo(json.dumps(report))
    else:
        _print_report(ui, report)


def start(ctx: typer.Context) -> None:
    """Start the service (unless it runs) and wait until it has loaded the index."""
    service, ui = _service(ctx)
    running = service.connect(ui, start=True)
    if running is None:
        raise typer.Exit(ExitCode.SETUP)
    _print_report(ui, _report(service, running))


def stop(ctx: typer.Context) -> None:
    """Stop the service; the next `rules ask` starts it again."""
    service, ui = _service(ctx)
    running = service.running()
    if running is None:
        ui.text("The Rulekeeper service is not running.")
        return
    service.stop(running)
    ui.text(f"Stopped the Rulekeeper service (pid {running.pid}).")


app.command()(status)
app.command()(start)
app.command()(stop)
