"""`rules keys`: API keys for `rules serve`, made strong, with the settings that turn them on."""

from __future__ import annotations

import json
import secrets
from typing import Annotated
from urllib.parse import urlsplit

import typer

from cli.state import get_state
from rag.settings import ENV_PREFIX, config_path

app = typer.Typer(
    help="API keys for `rules serve`: a secret key for servers, or a publishable key for a "
    "web page's widget, bound to the page's origins.",
    no_args_is_help=True,
)

KEY_BYTES = 32  # as random as a key can usefully be; longer only makes it harder to paste
SECRET_PREFIX = "sk_"
PUBLISHABLE_PREFIX = "pk_"  # as the README's examples and the demo key show them


def make_key(prefix: str) -> str:
    """A new key: the prefix says which kind it is, the rest comes from the secrets module."""
    return prefix + secrets.token_urlsafe(KEY_BYTES)


def _origin(url: str) -> str:
    """The origin browsers send for pages at `url` (scheme://host[:port], lowercase)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise typer.BadParameter(
            f"{url!r} is not an origin: give the page's scheme and host, e.g. "
            "https://shop.example.",
            param_hint="--origin",
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise typer.BadParameter(
            f"{url!r} has a path: a key is bound to the whole origin; give "
            f"{parts.scheme}://{parts.netloc}.",
            param_hint="--origin",
        )
    return f"{parts.scheme}://{parts.netloc}".lower()


def _toml(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string or list of them is TOML


def new(
    ctx: typer.Context,
    publishable: Annotated[
        bool,
        typer.Option(
            "--publishable",
            help="A key for a web page (the widget's data-api-key), accepted only from its "
            "--origin; without it, a secret key for servers (never put one in a page).",
        ),
    ] = False,
    origin: Annotated[
        list[str] | None,
        typer.Option(
            "--origin",
            help="With --publishable: an origin the page is served from, e.g. "
            "https://shop.example (repeatable).",
        ),
    ] = None,
) -> None:
    """Make a strong API key and print it with the settings to paste into the config file.

    The key is the first line, alone; then the lines for the config file, then the same as
    an environment variable.
    """
    origins = [_origin(url) for url in origin or []]
    if publishable and not origins:
        raise typer.BadParameter("a publishable key needs the page's --origin.")
    if origins and not publishable:
        raise typer.BadParameter("--origin binds a publishable key: add --publishable.")
    ui = get_state(ctx).ui
    where = config_path()
    if publishable:
        key = make_key(PUBLISHABLE_PREFIX)
        entry = {"key": key, "origins": origins}
        lines = [
            f"# A publishable key, accepted only from {', '.join(origins)} (its origins are "
            "added to CORS).",
            f"# Add to {where}:",
            "[[api.publishable_keys]]",
            f"key = {_toml(key)}",
            f"origins = {_toml(origins)}",
            "# Or, instead, in the environment (this replaces any publishable keys set there):",
            f"# {ENV_PREFIX}API__PUBLISHABLE_KEYS='{json.dumps([entry])}'",
        ]
    else:
        key = make_key(SECRET_PREFIX)
        lines = [
            "# A secret key, for servers calling the API: keep it out of pages and logs.",
            f"# Add to {where}, in its [api] table (if api_keys is set there, add the key to "
            "the list):",
            "[api]",
            f"api_keys = [{_toml(key)}]",
            "# Or, instead, in the environment (this replaces any secret keys set there):",
            f"# {ENV_PREFIX}API__API_KEYS='{json.dumps([key])}'",
        ]
    ui.text(key)
    ui.text("")
    ui.text("\n".join(lines))


app.command()(new)
