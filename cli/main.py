"""The `rules` command: registers each command from its module (entry point `cli.main:app`).

`rules eval` lives with the eval harness (eval/command.py) and registers itself here.
"""

from __future__ import annotations

import typer

from cli.commands import ask, chat, keys, library, models, serve, service, system
from cli.errors import EXIT_CODES_HELP, RulesGroup
from cli.state import get_state
from eval.command import register as register_eval

app = typer.Typer(
    name="rules",
    cls=RulesGroup,
    help="Rulekeeper: answers board-game rules questions from the rulebook, offline, "
    "citing the passages it used.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",  # reflows docstring paragraphs; `code` renders as code
    pretty_exceptions_show_locals=False,  # a bug's traceback must not dump settings or keys
)


@app.callback()
def main(ctx: typer.Context) -> None:
    # The state may have been injected (tests); otherwise it is created here, once.
    get_state(ctx)


app.command()(ask.ask)
app.command()(chat.chat)
app.command()(library.games)
app.command()(library.show)
app.command()(library.add)
app.command()(library.remove)
app.command()(library.index)
app.command()(library.render)
app.command()(system.doctor)
app.command()(system.config)
app.add_typer(models.app, name="models")
app.command()(serve.serve)
app.add_typer(keys.app, name="keys")
app.add_typer(service.app, name="service")
register_eval(app)

if __name__ == "__main__":
    app(prog_name="rules")
