"""`rules serve`: the HTTP API and the embeddable widget (see api/)."""

from __future__ import annotations

from typing import Annotated

import typer


def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8000,
    workers: Annotated[
        int, typer.Option(min=1, help="Worker processes; each loads its own models.")
    ] = 1,
) -> None:
    """Serve the chat API (`/v1/ask`, `/v1/chat/completions`, ...) and the widget (`/demo`)."""
    from api.server import serve as run_server  # FastAPI and uvicorn load only when serving

    typer.echo(f"Rulekeeper API on http://{host}:{port} (docs at /docs, widget demo at /demo)")
    run_server(host, port, workers)
