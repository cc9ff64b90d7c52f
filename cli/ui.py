"""Terminal output: rich in a terminal, plain text (no ANSI codes, no wrapping) when piped.

Everything a script may parse goes to stdout; errors, progress and notes go to stderr.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property

from rich.console import Console, RenderableType
from rich.padding import Padding
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

IndexProgress = Callable[[str, int, int], None]  # rag.pipeline.Progress: (stage, done, total)
Report = Callable[[str], None]  # rag.models.Progress: one message per step

# The index build reports stages by short names; say what each one does.
_STAGE_LABELS = {
    "chunk": "Reading rulebooks",
    "reuse": "Passages already embedded",
    "embed": "Embedding new passages",
    "sentences": "Embedding new sentences",
    "render": "Rendering sentences",
    "glossary": "Rendering the glossary's terms",
}
# The stages that can take minutes: shown line by line when stderr is not a terminal.
_SLOW_STAGES = {"embed", "sentences", "render", "glossary"}


class Ui:
    # Consoles are made on first use, not at construction, so they bind to the streams of the
    # invocation that prints (CliRunner swaps sys.stdout per invoke).
    @cached_property
    def out(self) -> Console:
        console = Console(highlight=False, emoji=False)
        # A pipe gets whole lines (grep-able); a terminal gets word-wrapped output.
        console.soft_wrap = not console.is_terminal
        return console

    @cached_property
    def err(self) -> Console:
        return Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)

    @property
    def rich(self) -> bool:
        return self.out.is_terminal

    def print(self, *renderables: RenderableType) -> None:
        self.out.print(*renderables)

    def text(self, text: str, style: str = "") -> None:
        """Print text as is: rulebook text may contain [brackets] that are not markup."""
        self.out.print(Text(text, style=style))

    def indented(self, text: str, style: str = "") -> None:
        if self.rich:
            self.out.print(Padding(Text(text, style=style), (0, 0, 0, 4)))
        else:
            self.out.print(Text("    " + text))

    def note(self, message: str) -> None:
        """A remark for the person, not for scripts: stderr."""
        self.err.print(Text(message, style="dim"))

    def warning(self, message: str) -> None:
        self.err.print(Text.assemble(("Warning: ", "bold yellow"), message))

    def error(self, message: str) -> None:
        self.err.print(Text.assemble(("Error: ", "bold red"), message))

    def table(
        self, columns: Sequence[str], rows: Iterable[Sequence[str]], title: str | None = None
    ) -> None:
        """A rich table in a terminal; tab-separated lines with a header row when piped."""
        if not self.rich:
            # Straight to the stream: rich would expand the tabs into spaces.
            self.out.file.write("".join("\t".join(row) + "\n" for row in (columns, *rows)))
            return
        table = Table(title=title, title_justify="left", header_style="bold")
        for i, column in enumerate(columns):
            # The first column is the key people type (a slug, a model name): never cut it.
            table.add_column(column, no_wrap=i == 0)
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        self.out.print(table)

    @contextmanager
    def index_progress(self) -> Iterator[IndexProgress]:
        """Progress bars for an index build in a terminal; plain lines when stderr is not one
        (a long build in a pipe or a log must not look hung)."""
        if not self.err.is_terminal:
            yield self._progress_lines()
            return
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.err,
            transient=True,
        ) as bars:
            tasks: dict[str, TaskID] = {}

            def report(stage: str, done: int, total: int) -> None:
                if stage not in tasks:
                    tasks[stage] = bars.add_task(_STAGE_LABELS.get(stage, stage), total=total)
                bars.update(tasks[stage], completed=done, total=total)

            yield report

    def _progress_lines(self) -> IndexProgress:
        """A line per slow stage when it starts, at each tenth of it done, and when it ends."""
        tenths: dict[str, int] = {}

        def report(stage: str, done: int, total: int) -> None:
            if stage not in _SLOW_STAGES:
                return
            tenth = done * 10 // total if total else 10
            if stage in tenths and tenth <= tenths[stage]:
                return
            tenths[stage] = tenth
            percent = f" ({done * 100 // total}%)" if total else ""
            self.err.print(Text(f"{_STAGE_LABELS.get(stage, stage)}: {done}/{total}{percent}"))

        return report

    @contextmanager
    def steps(self, title: str) -> Iterator[Report]:
        """Log each step of a long task on stderr, under a spinner when stderr is a terminal."""

        def log(message: str) -> None:
            self.err.print(Text(f"  {message}", style="dim"))

        if not self.err.is_terminal:
            yield log
            return
        with self.err.status(title) as status:

            def report(message: str) -> None:
                log(message)
                status.update(f"{title}: {message}")

            yield report
