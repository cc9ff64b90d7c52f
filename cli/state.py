"""Per-process state: the pipeline (built once, lazily) and the output.

Tests inject their own pipeline: `runner.invoke(app, args, obj=CliState(lambda: pipeline))`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import typer

from cli.ui import Ui

if TYPE_CHECKING:  # the pipeline pulls in numpy and FAISS: `rules --help` should not wait
    from rag.pipeline import Pipeline


def build_pipeline() -> Pipeline:
    """The pipeline from defaults, the config file and RULEKEEPER_* variables."""
    from rag.pipeline import Pipeline
    from rag.settings import load_settings

    return Pipeline(load_settings())


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
