"""Per-process state: the settings, the rules the commands ask (the warm local service, or
the pipeline, built once, lazily) and the output.

Tests inject their own pipeline: `runner.invoke(app, args, obj=CliState(lambda: pipeline))`;
an injected pipeline is always asked in this process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import typer

from cli.rules import Rules
from cli.ui import Ui
from rag.reading.corpus import incomplete_note

if TYPE_CHECKING:  # the pipeline pulls in numpy and FAISS: `rules --help` should not wait
    from rag.pipeline import Pipeline
    from rag.settings import Settings


def build_pipeline() -> Pipeline:
    """The pipeline from defaults, the config file and RULEKEEPER_* variables."""
    from rag.factory import make_pipeline
    from rag.settings import load_settings

    return make_pipeline(load_settings())


@dataclass
class CliState:
    pipeline_factory: Callable[[], Pipeline] = build_pipeline
    ui: Ui = field(default_factory=Ui)
    _pipeline: Pipeline | None = field(default=None, init=False)
    _start_service: bool = field(default=False, init=False)

    @property
    def pipeline(self) -> Pipeline:
        if self._pipeline is None:
            self._pipeline = self.pipeline_factory()
        return self._pipeline

    @cached_property
    def settings(self) -> Settings:
        if self.pipeline_factory is not build_pipeline:
            return self.pipeline.settings
        from rag.settings import load_settings

        return load_settings()

    def indexed_pipeline(self) -> Pipeline:
        """The pipeline with a current index, with progress bars if it must be built first;
        the vectors load on the first search (showing a rulebook needs none)."""
        with self.ui.index_progress() as progress:
            self.pipeline.ensure_current(progress=progress)
        return self.pipeline

    def rules(self, *, here: bool = False, start: bool = False) -> Rules:
        """The running local service, unless `here` or the service setting says otherwise;
        else the pipeline in this process. With `start`, a command that finds no service
        answers here (never slower than `--no-daemon`), then `answered` starts one for the
        next question."""
        if here or not self.settings.service.enabled or self.pipeline_factory is not build_pipeline:
            return self._noting_incomplete(self.indexed_pipeline())
        from cli.service_client import ServiceClient
        from cli.service_process import LocalService

        service = LocalService(self.settings)
        state = service.connect(self.ui)
        if state is None:
            self._start_service = start
            return self._noting_incomplete(self.indexed_pipeline())
        client = ServiceClient(state, self.settings, self.ui, self.indexed_pipeline)
        return self._noting_incomplete(client)

    def answered(self) -> None:
        """The command has answered: the service it found missing starts now, in the
        background, loading while the person reads."""
        if self._start_service:
            from cli.service_process import LocalService

            LocalService(self.settings).start(self.ui, wait=False)

    def _noting_incomplete(self, rules: Rules) -> Rules:
        for game in rules.corpus.incomplete:
            self.ui.warning(incomplete_note(game))
        return rules

    def stop_service(self) -> None:
        """After the rulebooks or the index changed: a running service holds the old ones,
        so it stops, and the next question starts it again."""
        if self.pipeline_factory is not build_pipeline:
            return
        from cli.service_process import LocalService

        service = LocalService(self.settings)
        pids = [pid for pid, _ in service.running()]
        if pids:
            service.stop(pids)
            self.ui.note("Stopped the Rulekeeper service: it held the rulebooks as they were.")


def get_state(ctx: typer.Context) -> CliState:
    return ctx.ensure_object(CliState)
