"""The rulebooks: `rules games`, `show`, `add`, `remove`, `index` and `render`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.table import Table
from rich.text import Text

from cli.errors import ExitCode
from cli.options import NoDaemonOption
from cli.render import print_games
from cli.state import get_state
from cli.toc import outline
from cli.ui import Ui
from cli.viewing import page_image
from rag.contents import Section, find_sections, table_of_contents
from rag.errors import IngestError, InputError
from rag.reading.glossary import GLOSSARY_FILE, other_lang
from rag.types import GameInfo, Lang

if TYPE_CHECKING:  # the pipeline pulls in numpy and FAISS: `rules --help` should not wait
    from rag.pipeline import Pipeline, PlannedBook

_LANGUAGES = {"en": "English", "zh": "Chinese"}


def games(ctx: typer.Context, no_daemon: NoDaemonOption = False) -> None:
    """List the games with their aliases and how many passages each rulebook has."""
    state = get_state(ctx)
    print_games(state.ui, state.rules(here=no_daemon).games())


def show(
    ctx: typer.Context,
    game: Annotated[str, typer.Argument(help="Game title, slug or alias.")],
    section: Annotated[
        str | None,
        typer.Argument(
            help="A number from the table of contents, or part of a section's name "
            "(case-insensitive; 'Setup > Map' narrows by path)."
        ),
    ] = None,
    page: Annotated[
        int | None,
        typer.Option(
            "--page",
            "-p",
            min=1,
            help="Instead: this page of a PDF rulebook as an image (PNG); prints its path.",
        ),
    ] = None,
    quote: Annotated[
        str | None,
        typer.Option("--quote", "-q", help="With --page: a sentence of the page to highlight."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="With --page: write the image here (default: in HOME's cache)."
        ),
    ] = None,
    no_daemon: NoDaemonOption = False,
) -> None:
    """Read a rulebook: its table of contents, or one section's text, or (`--page`) one of
    its printed pages, a sentence highlighted."""
    state = get_state(ctx)
    if page is None and (quote is not None or out is not None):
        raise typer.BadParameter("--quote and --out go with --page.", param_hint="--page")
    if page is not None:
        if section is not None:
            raise typer.BadParameter("give a SECTION or a --page, not both.", param_hint="--page")
        image = page_image(state.settings, state.pipeline.corpus.resolve(game), page, quote)
        if out is not None:
            out.write_bytes(image.read_bytes())
            image = out
        state.ui.text(str(image))
        return
    rules = state.rules(here=no_daemon)
    info = rules.corpus.resolve(game)
    toc = table_of_contents(rules.chunks(info.slug))
    if section is None:
        _print_toc(state.ui, f"{info.title}: contents", toc)
        state.ui.note(f"Read a section with: rules show {info.slug} NUMBER")
        return
    found = find_sections(toc, section)
    if not found:
        raise InputError(
            f"No section of {info.title} matches {section!r}: `rules show {info.slug}` lists them."
        )
    if len(found) > 1:
        state.ui.error(f"{section!r} matches {len(found)} sections; give one's number.")
        _print_toc(state.ui, f"{info.title}: sections matching {section!r}", found)
        raise typer.Exit(ExitCode.USER_ERROR)
    _print_section(state.ui, found[0])


def _first_page(section: Section) -> str:
    return str(section.pages[0]) if section.pages else ""


def _print_toc(ui: Ui, title: str, sections: list[Section]) -> None:
    """An indented outline in a terminal; number, full section path and page per line when
    piped. Books without pages (text, Markdown) show no page column."""
    paged = any(s.pages for s in sections)
    if not ui.rich:
        header = ("#", "section", "page") if paged else ("#", "section")
        rows = ((str(s.number), s.title, _first_page(s)) for s in sections)
        ui.table(header, (row if paged else row[:2] for row in rows))
        return
    by_number = {s.number: s for s in sections}
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", style="cyan")
    grid.add_column()
    if paged:
        grid.add_column(justify="right", style="dim")
    for number, depth, label in outline(sections):
        indent = "  " * depth
        cells: list[str | Text]
        if number is None:
            cells = ["", Text(indent + label, style="bold"), ""]
        else:
            page = _first_page(by_number[number])
            cells = [str(number), Text(indent + label), f"p. {page}" if page else ""]
        grid.add_row(*(cells if paged else cells[:2]))
    ui.print(Text(title, style="bold underline"), grid)


def _print_section(ui: Ui, section: Section) -> None:
    pages = section.pages
    where = f" (page {', '.join(map(str, pages))})" if pages else ""
    ui.print(Text(f"{section.number}. {section.title}{where}", style="bold"))
    ui.print()
    ui.text(section.text)


def add(
    ctx: typer.Context,
    file: Annotated[
        Path,
        typer.Argument(
            help="The rulebook: a PDF, text, Markdown, reStructuredText or HTML file, or a "
            "folder of such pages (each page a section, in name order)."
        ),
    ],
    title: Annotated[
        str,
        typer.Option(
            "--title",
            "-t",
            help="The game's name; no other game may already use it. Its Latin letters make "
            "the slug commands name the game by (a Chinese title takes it from an --alias).",
        ),
    ],
    alias: Annotated[
        list[str] | None,
        typer.Option(
            "--alias",
            "-a",
            help="Another name players use for it, no other game's (repeatable).",
        ),
    ] = None,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="Go ahead even when embedding it is estimated to take longer than "
            "embedding.add_confirm_minutes.",
        ),
    ] = False,
    render_all: Annotated[
        bool,
        typer.Option(
            "--render",
            help="Also render every sentence into the other language now (as `rules render` "
            "does), so that no question in it waits for renderings; without it, the time "
            "that takes is measured and said.",
        ),
    ] = False,
) -> None:
    """Add your own rulebook and index it, so questions can be asked about it.

    It says first how many passages and sentences it will embed and about how long that
    takes; past embedding.add_confirm_minutes it goes ahead only with --yes. It draws up the
    book's glossary (its game terms, each rendered once into the other language) and says
    how long rendering the whole book into the other language takes.
    """
    if not file.exists():
        raise IngestError(f"{file}: no such file or folder; check the path.")
    state = get_state(ctx)
    pipeline = state.pipeline
    plan = pipeline.plan_book(file, title, alias or ())
    limit = pipeline.settings.embedding.add_confirm_minutes
    if plan.seconds > limit * 60 and not yes:
        raise InputError(
            f"{_plan_line(plan)} That is past embedding.add_confirm_minutes ({limit:g} min): "
            "add --yes to go ahead."
        )
    state.ui.note(_plan_line(plan))
    with state.ui.index_progress() as progress:
        added = pipeline.add_planned(plan, progress=progress)
    state.stop_service()
    info, report = added.game, added.report
    pages = f"{report.pages} pages, " if report.pages is not None else ""
    # A Chinese text is measured in characters: it has no spaces to tell words apart.
    length = (
        f"{report.characters} characters" if report.language == "zh" else f"{report.words} words"
    )
    state.ui.text(
        f"Added {info.title} as {info.slug}: {pages}{report.sections} sections, "
        f"{report.sentences} sentences, {report.passages} passages, {length}, "
        f"{_LANGUAGES[report.language]}."
    )
    for warning in report.warnings:
        state.ui.warning(warning.message)
    _note_build(state.ui, pipeline.ensure_index().index.manifest)
    _note_renderings(state.ui, pipeline, info, render_all)
    state.ui.note(f'Ask with: rules ask "..." --game {info.slug}')


# Sentences timed to say how long rendering a whole book takes.
_TIMED_SENTENCES = 5


def _note_renderings(ui: Ui, pipeline: Pipeline, info: GameInfo, render_all: bool) -> None:
    """Render the book's glossary (with an LLM), and say how long rendering all its
    sentences into the other language takes: done now with `render_all`, else timed on a
    few."""
    other = other_lang(info.language)
    into = _LANGUAGES[other]
    ahead = f"`rules render {other} --game {info.slug}`"
    if not pipeline.generator.writes:
        terms = glossary.terms if (glossary := pipeline.glossary(info.slug)) else ()
        ui.note(
            f"Glossary: {len(terms)} game terms kept with the book, "
            f"{sum(t.by == 'book' for t in terms)} rendered into {into} by the book itself; "
            f"the {pipeline.generator.name} backend has no LLM for the others "
            f"(generation.backend). With one, {ahead} renders them and the rule text ahead."
        )
        return
    with ui.index_progress() as progress:
        started = time.perf_counter()
        glossary = pipeline.render_glossary(info.slug, progress)
        glossary_s = time.perf_counter() - started
        started = time.perf_counter()
        each: float | None = None
        if render_all:
            sentences = sum(pipeline.render_ahead(other, info.slug, progress))
        else:
            sentences, each = pipeline.time_rendering(other, info.slug, _TIMED_SENTENCES)
    by_book = sum(t.by == "book" for t in glossary.terms)
    by_model = sum(t.by == "model" and t.rendering is not None for t in glossary.terms)
    unrendered = sum(t.rendering is None for t in glossary.terms)
    ui.text(
        f"Glossary: {len(glossary.terms)} game terms, rendered into {into} once: {by_book} by "
        f"the book itself, {by_model} by the model in {_duration(glossary_s)}"
        + (f", {unrendered} not (none it made read as a name)" if unrendered else "")
        + f". Kept in {pipeline.settings.user_books_dir / info.slug / GLOSSARY_FILE}, where "
        "a rendering may be corrected."
    )
    if render_all:
        ui.text(
            f"{into} renderings: {sentences} sentences rendered in "
            f"{_duration(time.perf_counter() - started)}."
        )
    elif each is None:
        ui.text(f"{into} renderings: all {sentences} sentences are rendered already.")
    else:
        ui.text(
            f"{into} renderings: {_duration(each)} a sentence (timed on {_TIMED_SENTENCES}), "
            f"about {_duration(each * sentences)} for all {sentences}: {ahead} (or "
            f"`rules add --render`) makes them ahead; until then a question in {into} waits "
            f"about {_duration(each)} for its deciding sentence's rendering (twice that when "
            "it is asked for again word for word)."
        )


def _plan_line(plan: PlannedBook) -> str:
    guess = "" if plan.measured else " (a first guess: no build here has timed the embedder yet)"
    return (
        f"{plan.info.title}: {plan.passages} passages and {plan.sentences} sentences to "
        f"embed, about {_duration(plan.seconds)}{guess}."
    )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60:02d} min"


def remove(
    ctx: typer.Context,
    game: Annotated[
        str, typer.Argument(help="A game you added: its slug (always found), title or alias.")
    ],
) -> None:
    """Remove a rulebook you added (the built-in ones stay)."""
    state = get_state(ctx)
    before = state.pipeline.index_store().read_manifest()
    info = state.pipeline.remove_book(game)
    # Rebuild now, so the next question does not wait for it (no passage is embedded).
    manifest = state.indexed_pipeline().ensure_index().index.manifest
    state.stop_service()
    state.ui.text(f"Removed {info.title} ({info.slug}).")
    if manifest != before:  # a book whose adding was interrupted was never in the index
        _note_build(state.ui, manifest)


def _note_build(ui: Ui, manifest: dict[str, Any]) -> None:
    ui.note(f"Index built in {manifest['build_seconds']} s: {_build_counts(manifest)}.")


def _build_counts(manifest: dict[str, Any]) -> str:
    return f"{manifest['embedded']} passages embedded, {manifest['reused']} reused"


def index(
    ctx: typer.Context,
    rebuild: Annotated[
        bool,
        typer.Option(
            "--rebuild",
            help="Rebuild, embedding every passage anew, even if the index looks current.",
        ),
    ] = False,
) -> None:
    """Build the search index if the rulebooks or the embedder changed (or if asked to), and
    finish adding rulebooks whose `rules add` was interrupted."""
    state = get_state(ctx)
    pipeline = state.pipeline
    before = pipeline.index_store().read_manifest()
    interrupted = pipeline.corpus.incomplete
    slugs = [game.slug for game in interrupted]
    with state.ui.index_progress() as progress:
        manifest = pipeline.finish_adding(slugs, progress, rebuild=rebuild).index.manifest
    if manifest != before:
        state.stop_service()
    for game in interrupted:
        state.ui.text(f"Finished adding {game.title} ({game.slug}).")
    state.ui.text(
        f"Index at {pipeline.settings.index_dir}: {manifest['chunks']} passages from "
        f"{len(manifest['games'])} games, embedder {manifest['embedding_model']}, "
        f"{manifest['index_type']} search, built {manifest['built_at']} "
        f"in {manifest['build_seconds']} s ({_build_counts(manifest)})."
    )


def render(
    ctx: typer.Context,
    lang: Annotated[
        str,
        typer.Argument(help="The language questions will be asked in: en or zh."),
    ],
    game: Annotated[
        str | None,
        typer.Option("--game", "-g", help="Only this game's rulebook. Default: every rulebook."),
    ] = None,
) -> None:
    """Render every sentence of the rulebooks written in another language into LANG with
    the LLM, ahead of time, and keep the renderings on disk: a question in LANG then waits
    for no rendering, only for its conclusion.

    Slow (a few seconds a sentence on a small CPU); interrupted, it goes on where it
    stopped when run again. The warm local service finds the renderings without a restart.
    """
    if lang not in _LANGUAGES:
        raise typer.BadParameter(f"{lang!r} is not one of: en, zh.", param_hint="LANG")
    state = get_state(ctx)
    pipeline = state.pipeline
    with state.ui.index_progress() as progress:
        made, kept = pipeline.render_ahead(cast(Lang, lang), game, progress)
    state.ui.text(
        f"{made + kept} sentences rendered into {_LANGUAGES[lang]} ({made} now, {kept} "
        f"already), kept in {pipeline.settings.renderings_dir}."
    )
