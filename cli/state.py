"""Per-process state: the pipeline (built once, lazily) and the output.

Tests inject their own pipeline: `runner.invoke(app, args, obj=CliState(lambda: pipeline))`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import typer

from cli.ui import Ui
from rag.errors import RulekeeperError

if TYPE_CHECKING:  # the pipeline pulls in numpy and FAISS: `rules --help` should not wait
    from pydantic import ValidationError

    from rag.pipeline import Pipeline


def build_pipeline() -> Pipeline:
    """The pipeline from defaults, the config file and RULEKEEPER_* variables."""
    from pydantic import ValidationError

    from rag.pipeline import Pipeline
    from rag.settings import load_settings

    try:
        settings = load_settings()
    except ValidationError as exc:
        raise RulekeeperError(settings_error(exc)) from exc
    return Pipeline(settings)


def settings_error(exc: ValidationError) -> str:
    """One line naming the bad setting and both places it can come from."""
    from rag.settings import config_path

    first = exc.errors()[0]
    dotted = ".".join(str(part) for part in first["loc"])
    env = "RULEKEEPER_" + "__".join(str(part) for part in first["loc"]).upper()
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return (
        f"Invalid setting {dotted} = {first.get('input')!r}: {first['msg']}{more}. "
        f"Fix {env} or {config_path()}; `rules config` shows the settings."
    )


@dataclass
class CliState:
    pipeline_factory: Callable[[], Pipeline] = build_pipeline
    ui: Ui = field(default_factory=Ui)
    _pipeline: Pipeline | None = field(default=None, init=False)

    @property
    def pipeline(self) -> Pipeline:
        if self._pipeline is None:
            self._pipeline = self.pipeline_factory()
        return self._pipeline

    def indexed_pipeline(self) -> Pipeline:
        """The pipeline with its index loaded, with progress bars if it must be built first."""
        with self.ui.index_progress() as progress:
            self.pipeline.ensure_index(progress=progress)
        return self.pipeline


def get_state(ctx: typer.Context) -> CliState:
    return ctx.ensure_object(CliState)
