"""The pipeline the settings ask for: the standard one, or one built by `pipeline_factory`."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from rag.errors import RulekeeperError

if TYPE_CHECKING:  # the pipeline pulls in numpy and FAISS: light commands import this module
    from rag.pipeline import Pipeline
    from rag.settings import Settings


def make_pipeline(settings: Settings) -> Pipeline:
    if settings.pipeline_factory is None:
        from rag.pipeline import Pipeline

        return Pipeline(settings)
    module, _, name = settings.pipeline_factory.partition(":")
    try:
        factory = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise RulekeeperError(
            f"Setting pipeline_factory = {settings.pipeline_factory!r} names no importable "
            f"function ({exc}); expected module:function."
        ) from exc
    pipeline: Pipeline = factory(settings)
    return pipeline
