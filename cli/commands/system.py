"""The installation: `rules doctor` and `rules config`."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import tomllib
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from cli.commands.models import print_registry
from cli.errors import ExitCode
from cli.settings_view import render_settings, settings_reference
from cli.state import get_state
from cli.ui import Ui
from rag.errors import RulekeeperError
from rag.generation import llama_available
from rag.reading.corpus import incomplete_note
from rag.settings import config_path

if TYPE_CHECKING:
    from rag.pipeline import Pipeline

Status = Literal["ok", "warn", "fail"]
Check = tuple[Status, str, str]  # (status, what, detail)

# Distributions whose versions explain most "works on my machine" reports.
PACKAGES = (
    "rulekeeper",
    "typer",
    "rich",
    "pydantic",
    "pydantic-settings",
    "numpy",
    "faiss-cpu",
    "torch",
    "sentence-transformers",
    "llama-cpp-python",
    "jieba",
    "pdfplumber",
)
_MARKS = {"ok": "✔", "warn": "!", "fail": "✘"}


def config(
    ctx: typer.Context,
    path_only: Annotated[
        bool, typer.Option("--path", help="Print only the config file's path.")
    ] = False,
    reference: Annotated[
        bool,
        typer.Option(
            "--reference",
            help="Print the reference of every setting (type, default, variable, meaning) "
            "as Markdown, as docs/configuration.md has it.",
        ),
    ] = False,
) -> None:
    """Show the effective settings (defaults < config file < RULEKEEPER_* variables)."""
    path = config_path()
    state = get_state(ctx)
    if path_only:
        state.ui.text(str(path))
        return
    if reference:
        state.ui.text(settings_reference().rstrip("\n"))
        return
    settings = state.pipeline.settings  # first: it reports a malformed file in one line
    file_values = tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    state.ui.text(
        f"# Effective Rulekeeper settings.\n# Config file: {_config_file()}.\n"
        "# Precedence: RULEKEEPER_* variables (nested: RULEKEEPER_GROUP__KEY) > config file "
        "> defaults.\n"
    )
    state.ui.text(render_settings(settings, file_values, os.environ))


def doctor(ctx: typer.Context) -> None:
    """Check the installation: settings paths, rulebooks, models, index, package versions."""
    state = get_state(ctx)
    pipeline = state.pipeline
    checks = [
        _check("config file", lambda: ("ok", _config_file())),
        _check("rulebooks", lambda: _corpus_check(pipeline)),
        _check("embedder", lambda: ("ok", pipeline.embedder.name)),
        _check("answers", lambda: _generator_check(pipeline)),
        _check("index", lambda: _index_check(pipeline)),
    ]
    ui = state.ui
    ui.table(
        ("", "check", "detail"),
        ((_MARKS[status], what, detail) for status, what, detail in checks),
        title="Rulekeeper doctor",
    )
    _print_paths(ui, pipeline)
    print_registry(ui, pipeline.settings)
    ui.table(
        ("package", "version"),
        (("python", platform.python_version()), *((p, _version(p)) for p in PACKAGES)),
        title="Packages",
    )
    if any(status == "fail" for status, _, _ in checks):
        raise typer.Exit(ExitCode.SETUP)


def _check(what: str, run: Callable[[], tuple[Status, str]]) -> Check:
    try:
        status, detail = run()
    except RulekeeperError as exc:
        return "fail", what, str(exc)
    return status, what, detail


def _config_file() -> str:
    path = config_path()
    return f"{path} ({'present' if path.is_file() else 'absent: defaults apply'})"


def _corpus_check(pipeline: Pipeline) -> tuple[Status, str]:
    games = pipeline.corpus.games
    added = sum(not g.builtin for g in games)
    found = f"{len(games)} games ({added} added by you)"
    interrupted = pipeline.corpus.incomplete
    if interrupted:
        return "warn", "; ".join([found, *map(incomplete_note, interrupted)])
    return "ok", found


def _generator_check(pipeline: Pipeline) -> tuple[Status, str]:
    generation = pipeline.settings.generation
    name = pipeline.generator.name
    if generation.backend == "auto" and name == "extractive":
        missing = (
            f"`rules models fetch {generation.model}` fetches the model"
            if llama_available()
            else "llama-cpp-python is not installed (scripts/setup.sh builds it)"
        )
        return "warn", f"answers quote the rulebook (extractive), no LLM: {missing}"
    return "ok", f"{name} (backend setting: {generation.backend})"


def _index_check(pipeline: Pipeline) -> tuple[Status, str]:
    store = pipeline.index_store()
    if store.read_manifest() is None:
        return "warn", f"not built yet at {store.folder}: `rules index` builds it"
    if not store.is_current(pipeline.corpus, pipeline.settings, pipeline.embedder.name):
        return "warn", "out of date (rulebooks or embedder changed): rebuilt on next use"
    manifest = store.load().manifest  # proves the files are readable, not only the manifest
    return "ok", f"{manifest['chunks']} passages, built {manifest['built_at']}"


def _print_paths(ui: Ui, pipeline: Pipeline) -> None:
    s = pipeline.settings
    ui.table(
        ("setting", "path"),
        (
            ("home", str(s.home)),
            ("built-in rulebooks", str(s.corpus_dir)),
            ("added rulebooks", str(s.user_books_dir)),
            ("models dir", str(s.model_dir)),
            ("index dir", str(s.index_dir)),
        ),
        title="Paths",
    )


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
