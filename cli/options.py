"""Options shared by several commands, declared once; bounds and help come from the settings
model so the command line never drifts from what the pipeline accepts."""

from __future__ import annotations

from typing import Annotated, cast

import annotated_types
import typer

from rag.settings import RetrievalSettings

_K_FIELD = RetrievalSettings.model_fields["k"]
_K_MIN = cast(int, next(m.ge for m in _K_FIELD.metadata if isinstance(m, annotated_types.Ge)))
_K_MAX = cast(int, next(m.le for m in _K_FIELD.metadata if isinstance(m, annotated_types.Le)))

GameOption = Annotated[
    str | None,
    typer.Option(
        "--game",
        "-g",
        help="Game title, slug or alias (see `rules games`). Default: the game the question names.",
    ),
]

KOption = Annotated[
    int | None,
    typer.Option(
        "--k",
        min=_K_MIN,
        max=_K_MAX,
        help=f"{_K_FIELD.description} Default: the retrieval.k setting (see `rules config`).",
    ),
]

NoDaemonOption = Annotated[
    bool,
    typer.Option(
        "--no-daemon",
        help="Answer in this process, not through the warm local service "
        "(setting service.enabled).",
    ),
]
