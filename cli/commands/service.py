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


def _report(service: LocalService, pid: int, state: ServiceState | None) -> dict[str, Any]:
    rss = resident_bytes(pid)
    found: dict[str, Any] = {
        "pid": pid,
        "memory_mb": None if rss is None else round(rss / 2**20, 1),
    }
    if state is None:  # running, but its record is lost: it cannot be asked, only stopped
        return {**found, "status": "unrecorded"}
    return {
        **found,
        "status": service.readiness(state),
        "url": state.url,
        "version": state.version,
        "uptime_s": round(time.time() - state.started_at, 1),
    }


def _print_service(ui: Ui, report: dict[str, Any]) -> None:
    memory = "unknown" if report["memory_mb"] is None else f"{report['memory_mb']} MB"
    if report["status"] == "unrecorded":
        ui.text(
            f"A Rulekeeper service runs without its record (pid {report['pid']}, memory "
            f"{memory}): the next `rules ask` or `rules service stop` stops it."
        )
        return
    ui.text(
        f"The Rulekeeper service is {report['status']} at {report['url']} "
        f"(pid {report['pid']}, version {report['version']}, up {report['uptime_s']:.0f} s, "
        f"memory {memory})."
    )


def status(
    ctx: typer.Context,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object and nothing else on stdout.")
    ] = False,
) -> None:
    """Whether the service runs: its address, process, version, state and memory (every
    service of this home, if more than one runs)."""
    service, ui = _service(ctx)
    reports = [_report(service, pid, state) for pid, state in service.running()]
    if as_json:
        # The first service's fields at the top, as scripts read them when one runs.
        first = reports[0] if reports else {}
        log = str(service.log_path)
        typer.echo(json.dumps({"running": bool(reports), **first, "services": reports, "log": log}))
        return
    if not reports:
        ui.text("The Rulekeeper service is not running; `rules ask` starts it.")
    for report in reports:
        _print_service(ui, report)
    ui.note(f"Log: {service.log_path}")


def start(ctx: typer.Context) -> None:
    """Start the service (unless it runs) and wait until it has loaded the index."""
    service, ui = _service(ctx)
    running = service.connect(ui) or service.start(ui, wait=True)
    if running is None:
        raise typer.Exit(ExitCode.SETUP)
    _print_service(ui, _report(service, running.pid, running))


def stop(ctx: typer.Context) -> None:
    """Stop every service of this home; the next `rules ask` starts one again."""
    service, ui = _service(ctx)
    pids = [pid for pid, _ in service.running()]
    if not pids:
        ui.text("The Rulekeeper service is not running.")
        return
    service.stop(pids)
    listed = ", ".join(map(str, pids))
    ui.text(
        f"Stopped the Rulekeeper service (pid {listed})."
        if len(pids) == 1
        else f"Stopped {len(pids)} Rulekeeper services (pids {listed})."
    )


app.command()(status)
app.command()(start)
app.command()(stop)
