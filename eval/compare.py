"""`rules eval --compare`: one gold set under several named configurations, side by side.

A configuration file (TOML) names the configurations; each overrides settings groups on
top of the base settings (defaults < config file < RULEKEEPER_* environment):

    [bm25-extractive]
    description = "Keyword search only; answers quoted from the passages."
    retrieval = { mode = "bm25" }
    generation = { backend = "extractive" }

Each configuration's items.jsonl and report.json go to OUT/<name>/, the comparison to
OUT/compare.md (a table, the best value per metric in bold) and OUT/compare.png.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from eval.runner import (
    COLUMNS,
    Column,
    GoldItem,
    ItemResult,
    format_table,
    format_value,
    run_eval,
)
from rag.backends import embedder_for, make_generator
from rag.errors import InputError, RulekeeperError
from rag.generation import Generator
from rag.pipeline import Pipeline
from rag.searching.embedding import Embedder
from rag.settings import Settings, moved_message

if TYPE_CHECKING:
    from matplotlib.axes import Axes

MARKDOWN_FILE = "compare.md"
CHART_FILE = "compare.png"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a configuration's name is a folder name

PipelineFactory = Callable[[Settings], Pipeline]
ConfigProgress = Callable[[str, ItemResult, int, int], None]  # (config name, result, done, total)
T = TypeVar("T")


# --- configurations ---------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    name: str
    description: str
    overrides: dict[str, dict[str, Any]]  # settings group -> field -> value
    settings: Settings  # the base settings with the overrides applied

    def overrides_text(self) -> str:
        pairs = [
            f"{group}.{key}={value if isinstance(value, str) else json.dumps(value)}"
            for group, values in self.overrides.items()
            for key, value in values.items()
        ]
        return ", ".join(pairs) or "(the base settings)"

    def markdown_item(self) -> str:
        parts = [f"**{self.name}**:", self.description, f"`{self.overrides_text()}`"]
        return "- " + " ".join(part for part in parts if part)


def _groups(settings: Settings) -> list[str]:
    return [name for name, value in settings if isinstance(value, BaseModel)]


def apply_overrides(base: Settings, overrides: Mapping[str, Any]) -> Settings:
    """The base settings with fields of some groups replaced, every new value validated.

    model_copy(update=...) alone would accept "bm52" as a retrieval mode: it skips
    validation, so each changed group is validated whole before it is swapped in.
    """
    updates: dict[str, BaseModel] = {}
    for name, values in overrides.items():
        group = getattr(base, name, None)
        if not isinstance(group, BaseModel):
            raise InputError(f"{name!r} is not a settings group (use {', '.join(_groups(base))})")
        if not isinstance(values, Mapping):
            raise InputError(f"{name} must be a table, such as {name} = {{ key = value }}")
        unknown = sorted(set(values) - set(type(group).model_fields))
        moved = [m for key in unknown if (m := moved_message((name, key)))]
        if moved:
            raise InputError("; ".join(moved))
        if unknown:
            raise InputError(f"{name} has no setting {', '.join(unknown)}")
        try:
            updates[name] = type(group).model_validate({**group.model_dump(), **values})
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"])
            raise InputError(f"{name}.{field}: {error['msg']}") from exc
    return base.model_copy(update=updates)


def _config(path: Path, name: str, table: Any, base: Settings) -> Config:
    where = f"{path} [{name}]"
    if not _NAME.match(name):
        raise InputError(f"{where}: use letters, digits, '.', '_' and '-' (it names a folder).")
    if not isinstance(table, dict):
        raise InputError(f"{where}: must be a table of settings groups.")
    overrides = {key: value for key, value in table.items() if key != "description"}
    try:
        settings = apply_overrides(base, overrides)
    except InputError as exc:
        raise InputError(f"{where}: {exc}.") from exc
    return Config(name, str(table.get("description", "")), overrides, settings)


def load_configs(path: Path, base: Settings) -> list[Config]:
    """Every configuration of the file, in file order; all are checked before any runs."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(f"Comparison file {path} not found.") from exc
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"Cannot read comparison file {path}: {exc}") from exc
    configs = [_config(path, name, table, base) for name, table in data.items()]
    if not configs:
        raise InputError(f"Comparison file {path} names no configuration.")
    return configs


# --- running ----------------------------------------------------------------------------


def _shared(cache: dict[str, T], key: str, make: Callable[[], T]) -> T:
    if key not in cache:
        cache[key] = make()
    return cache[key]


class SharedModels:
    """Builds each configuration's pipeline; configurations share the models they agree on.

    One embedder per embedding model, so configurations differing elsewhere reuse it and the
    index it built (the on-disk index stays current: loaded, not rebuilt), and one generator
    per generation settings, so an LLM is loaded once for all configurations that use it.
    """

    def __init__(self) -> None:
        self._embedders: dict[str, Embedder] = {}
        self._generators: dict[str, Generator] = {}

    def __call__(self, settings: Settings) -> Pipeline:
        # A server backend is the openai settings' server as well.
        server = settings.openai.model_dump_json()
        embedding = settings.embedding.model_dump_json(exclude={"batch_size"}) + server
        embedder = _shared(self._embedders, embedding, lambda: embedder_for(settings))
        # The candidate and quote settings are read by the pipeline, not by the generator.
        generation = (
            settings.generation.model_dump_json(
                exclude={"passages", "quotes", "basis", "min_sentence_score"}
            )
            + server
        )
        generator = _shared(self._generators, generation, lambda: make_generator(settings))
        return Pipeline(settings, embedder=embedder, generator=generator)


@dataclass(frozen=True)
class ConfigRun:
    config: Config
    report: dict[str, Any] | None = None
    error: str | None = None  # why the configuration could not run


def _run_order(configs: Sequence[Config], base: Settings) -> list[Config]:
    """Other embedders first, grouped by model and precision, the base embedder's last.

    There is one index folder, rebuilt whenever the embedder changes: grouping builds each
    embedder's index once, and finishing on the base one leaves the index that the other
    commands use as it was.
    """

    def embedder(settings: Settings) -> tuple[str, str]:
        return settings.embedding.model, settings.embedding.precision

    return sorted(
        configs, key=lambda c: (embedder(c.settings) == embedder(base), embedder(c.settings))
    )


def _run_config(
    config: Config,
    items: Sequence[GoldItem],
    out_dir: Path,
    k: int | None,
    make_pipeline: PipelineFactory,
    progress: ConfigProgress | None,
) -> ConfigRun:
    """One configuration's eval. One that cannot run (its model never fetched, or a bug in
    a component only it uses) is reported with its error, and the other configurations
    still run: a comparison takes hours with the LLM, and one failure must not lose it."""
    try:
        report = run_eval(
            make_pipeline(config.settings),
            items,
            k=k,
            out_dir=out_dir / config.name,
            progress=partial(progress, config.name) if progress else None,
        )
    except RulekeeperError as exc:
        return ConfigRun(config, error=str(exc))
    except Exception as exc:  # a bug: named by its type, so the report does not hide it
        return ConfigRun(config, error=f"{type(exc).__name__}: {exc}")
    return ConfigRun(config, report=report)


def run_compare(
    configs: Sequence[Config],
    items: Sequence[GoldItem],
    out_dir: Path,
    *,
    base: Settings,
    k: int | None = None,
    make_pipeline: PipelineFactory | None = None,
    progress: ConfigProgress | None = None,
) -> list[ConfigRun]:
    """Run every configuration, write compare.md and compare.png; runs come in file order.

    k, when given, overrides every configuration's retrieval.k.
    """
    make_pipeline = make_pipeline or SharedModels()
    finished = {
        config.name: _run_config(config, items, out_dir, k, make_pipeline, progress)
        for config in _run_order(configs, base)
    }
    runs = [finished[config.name] for config in configs]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MARKDOWN_FILE).write_text(render_markdown(runs, len(items)), encoding="utf-8")
    write_chart(out_dir / CHART_FILE, runs)
    return runs


def compare_json(runs: Sequence[ConfigRun], out_dir: Path) -> dict[str, Any]:
    """`rules eval --compare --json`: each configuration's report (or error) and the files."""
    return {
        "configs": {
            run.config.name: run.report if run.report is not None else {"error": run.error}
            for run in runs
        },
        "markdown": str(out_dir / MARKDOWN_FILE),
        "chart": str(out_dir / CHART_FILE),
    }


# --- the report -------------------------------------------------------------------------


def _finished(runs: Sequence[ConfigRun]) -> list[tuple[str, dict[str, Any]]]:
    return [(run.config.name, run.report) for run in runs if run.report is not None]


def render_compare_text(runs: Sequence[ConfigRun], out_dir: Path) -> str:
    """The comparison for a terminal: one row per configuration that ran, then the files."""
    lines = [format_table(_finished(runs)), ""]
    lines += [f"{run.config.name} could not run: {run.error}" for run in runs if run.error]
    lines += [f"Report: {out_dir / MARKDOWN_FILE}", f"Chart: {out_dir / CHART_FILE}"]
    return "\n".join(lines)


def _best(column: Column, summaries: Sequence[dict[str, Any]]) -> float | None:
    """The best value as displayed (3 decimals), so values that look tied are all bold."""
    values = [round(v, 3) for v in (column.value(s) for s in summaries) if v is not None]
    if not values:
        return None
    return min(values) if column.lower_is_better else max(values)


def _cell(value: float | None, best: float | None) -> str:
    text = format_value(value)
    return f"**{text}**" if value is not None and round(value, 3) == best else text


def render_markdown(runs: Sequence[ConfigRun], n_items: int) -> str:
    finished = _finished(runs)
    best = {column: _best(column, [s for _, s in finished]) for column in COLUMNS}
    header = ["config", "n", "failed", *(column.header for column in COLUMNS)]
    rows = [
        [name, str(s["n"]), str(s["errors"]), *(_cell(c.value(s), best[c]) for c in COLUMNS)]
        for name, s in finished
    ]
    table = [
        "| " + " | ".join(header) + " |",
        "|---|" + "---:|" * (len(header) - 1),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
    lines = [
        "# Rulekeeper eval: configurations compared",
        "",
        f"{n_items} gold items per configuration. The best value of each metric is in bold "
        "(latency: the lowest; every other metric: the highest). "
        "facts = key-fact recall, abstain = abstention accuracy, cite = citation precision, "
        "lang = language match; - = nothing to measure.",
        "",
        *table,
        "",
        "## Configurations",
        "",
        *(run.config.markdown_item() for run in runs),
    ]
    failed = [run for run in runs if run.error is not None]
    if failed:
        lines += [
            "",
            "## Could not run",
            "",
            *(f"- **{r.config.name}**: {r.error}" for r in failed),
        ]
    lines += ["", f"![metrics per configuration]({CHART_FILE})", ""]
    return "\n".join(lines)


def _bars(
    axes: Axes, columns: Sequence[Column], finished: Sequence[tuple[str, dict[str, Any]]]
) -> None:
    """Grouped bars: one group per metric, one bar per configuration (gaps for no value)."""
    width = 0.8 / max(len(finished), 1)
    for i, (name, summary) in enumerate(finished):
        heights = [
            value if (value := c.value(summary)) is not None else float("nan") for c in columns
        ]
        axes.bar([x + i * width for x in range(len(columns))], heights, width, label=name)
    middle = width * (len(finished) - 1) / 2
    axes.set_xticks([x + middle for x in range(len(columns))], [c.header for c in columns])


def write_chart(path: Path, runs: Sequence[ConfigRun]) -> None:
    # Imported here: matplotlib takes a noticeable part of a second to import, and every
    # other `rules` command would pay for it. The Agg canvas renders without a display.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    finished = _finished(runs)
    quality = [c for c in COLUMNS if not c.lower_is_better]
    latency = [c for c in COLUMNS if c.lower_is_better]
    figure = Figure(figsize=(13, 5.5), layout="constrained")
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2, width_ratios=[len(quality), len(latency) + 1])
    _bars(left, quality, finished)
    left.set_ylim(0, 1)
    left.set_title("Quality (higher is better)")
    _bars(right, latency, finished)
    right.set_title("Latency in seconds (lower is better)")
    if finished:
        figure.legend(
            *left.get_legend_handles_labels(),
            loc="outside lower center",
            ncols=min(len(finished), 4),
        )
    figure.savefig(path, dpi=110)
