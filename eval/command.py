"""The `rules eval` command; the CLI adds it to its app with `register(app)`.

With --json, stdout carries exactly one JSON object (the report, or with --compare the
comparison) and everything else, progress included, goes to stderr.

The harness is imported when the command runs, not when it is registered: `rules --help`
must not wait for numpy, FAISS and the models' libraries.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from eval import DEFAULT_CONFIGS, DEFAULT_GOLD
from rag.errors import IndexError_, InputError, ModelError, RulekeeperError
from rag.settings import MAX_K

if TYPE_CHECKING:
    from eval.compare import PipelineFactory
    from eval.runner import GoldItem, ItemResult
    from rag.pipeline import Pipeline
    from rag.settings import Settings

HELP = """Score the pipeline on a gold Q&A file (JSONL, see docs/eval-format.md).

Prints retrieval (hit@1, hit@5, MRR) and answer metrics (key-fact recall, abstention
accuracy, citation precision, language match), overall and per language, game and
question type. With --compare, runs the gold file under each named configuration of
CONFIG_TOML (default eval/configs/compare.toml) and writes compare.md and compare.png.
"""


@contextmanager
def _user_errors() -> Iterator[None]:
    """A user's mistake (missing or bad gold file, bad configuration or setting, unknown
    game): one line and exit code 1. A setup problem (a model never fetched, a corrupt
    index) goes on to the host app's error boundary, which gives it its own exit code."""
    try:
        yield
    except (ModelError, IndexError_):
        raise
    except RulekeeperError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(1) from exc


def _print_progress(result: ItemResult, done: int, total: int, prefix: str = "") -> None:
    score = result.score
    if score.error is not None:
        status = f"FAILED: {score.error}"
    else:
        covered = f"{sum(score.facts)}/{len(score.facts)}"
        status = f"{score.latency_s:.2f}s, first hit {score.first_hit or '-'}, facts {covered}"
    typer.echo(f"{prefix}[{done}/{total}] {result.item.id}: {status}", err=True)


def _print_index_progress(stage: str, done: int, total: int) -> None:
    if done == total:  # one line per finished stage: embedding alone has dozens of batches
        typer.echo(f"index: {stage} {done}/{total}", err=True)


def _indexed(factory: PipelineFactory) -> PipelineFactory:
    """The factory, with each pipeline's index loaded at once, or built with progress shown:
    building it for a new embedding model takes minutes and would otherwise look stuck."""

    def make(settings: Settings) -> Pipeline:
        pipeline = factory(settings)
        pipeline.ensure_index(progress=_print_index_progress)
        return pipeline

    return make


def _print_compare_progress(name: str, result: ItemResult, done: int, total: int) -> None:
    _print_progress(result, done, total, prefix=f"{name} ")


def _single(
    pipeline: Pipeline, items: list[GoldItem], k: int | None, out: Path | None, resume: bool
) -> tuple[dict[str, Any], str]:
    from eval.runner import ITEMS_FILE, render_table, run_eval

    report = run_eval(pipeline, items, k=k, out_dir=out, progress=_print_progress, resume=resume)
    if out is not None:
        typer.echo(f"Per-item results: {out / ITEMS_FILE}", err=True)
    return report, render_table(report)


def _compare(
    factory: PipelineFactory,
    settings: Settings,
    items: list[GoldItem],
    k: int | None,
    out: Path | None,
    config: Path | None,
) -> tuple[dict[str, Any], str]:
    from eval.compare import compare_json, load_configs, render_compare_text, run_compare

    configs = load_configs(config or DEFAULT_CONFIGS, settings)  # all checked before any runs
    folder = out or Path(f"rulekeeper-compare-{time.strftime('%Y%m%d-%H%M%S')}")
    runs = run_compare(
        configs,
        items,
        folder,
        base=settings,
        k=k,
        make_pipeline=factory,
        progress=_print_compare_progress,
    )
    return compare_json(runs, folder), render_compare_text(runs, folder)


def register(app: typer.Typer, *, make_pipeline: PipelineFactory | None = None) -> None:
    """Add `eval` to the app. make_pipeline builds a pipeline from settings; by default
    configurations share their models (eval.compare.SharedModels). Tests pass fakes."""

    @app.command("eval", help=HELP)
    def eval_command(
        config: Annotated[
            Path | None,
            typer.Argument(
                metavar="CONFIG_TOML",
                help="With --compare: the named configurations "
                "[default: eval/configs/compare.toml].",
                show_default=False,
            ),
        ] = None,
        gold: Annotated[Path, typer.Option(help="Gold Q&A file (JSONL).")] = DEFAULT_GOLD,
        k: Annotated[
            int | None,
            typer.Option(
                min=1,
                max=MAX_K,
                help="Passages per question [default: retrieval.k, 5].",
                show_default=False,
            ),
        ] = None,
        out: Annotated[
            Path | None,
            typer.Option(
                help="Folder for items.jsonl (one line per item) and report.json; with "
                "--compare, one such folder per configuration plus compare.md and compare.png "
                "[default with --compare: ./rulekeeper-compare-DATE-TIME].",
                show_default=False,
            ),
        ] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print only the report, as one JSON object.")
        ] = False,
        compare: Annotated[
            bool, typer.Option("--compare", help="Compare the configurations of CONFIG_TOML.")
        ] = False,
        limit: Annotated[int | None, typer.Option(min=1, help="Only the first N items.")] = None,
        game: Annotated[str | None, typer.Option(help="Only the items about this game.")] = None,
        resume: Annotated[
            bool,
            typer.Option(
                "--resume",
                help="With --out: ask only the items its items.jsonl lacks (an interrupted "
                "run goes on); the report counts them all.",
            ),
        ] = False,
    ) -> None:
        from eval.compare import SharedModels
        from eval.runner import load_gold, select_items
        from rag.pipeline import Pipeline
        from rag.settings import load_settings

        with _user_errors():
            if config is not None and not compare:
                raise InputError(f"{config}: a configuration file is only read with --compare.")
            if resume and (out is None or compare):
                raise InputError("--resume goes on from a single run's --out folder.")
            settings = load_settings()  # a bad setting is a RulekeeperError
            factory = _indexed(make_pipeline or SharedModels())
            # Choosing items needs only the corpus: a plain pipeline builds no model.
            items = select_items(Pipeline(settings), load_gold(gold), game, limit)
            if not items:
                raise InputError(f"No item of {gold} is about {game}.")
            # Libraries that print would break the single JSON object --json puts on stdout.
            with redirect_stdout(sys.stderr) if as_json else nullcontext():
                if compare:
                    payload, text = _compare(factory, settings, items, k, out, config)
                else:
                    payload, text = _single(factory(settings), items, k, out, resume)
            typer.echo(json.dumps(payload, ensure_ascii=False) if as_json else text)
