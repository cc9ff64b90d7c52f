"""`rules config`'s view of the effective settings: TOML one can paste into the config file,
each key with its description and, when it is not the default, where its value came from."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel

from rag.settings import ENV_PREFIX, NON_SETTING_VARIABLES

# Secrets are masked, never printed whole: terminals get screenshotted and logs get shared.
# By name, so that a new key, token or password setting is masked without being listed here.
_SECRET_NAME = re.compile(r"(^|_)(keys?|tokens?|secrets?|passwords?)$", re.IGNORECASE)


def render_settings(
    settings: BaseModel, file_values: Mapping[str, Any], environ: Mapping[str, str]
) -> str:
    env = {key.upper(): key for key in environ}  # pydantic-settings matches env case-insensitively
    top, groups = [], []
    for name, value in settings:
        if isinstance(value, BaseModel):
            groups.append((name, value))
        else:
            top += _entry(settings, name, value, (name,), file_values, env)
    lines = top
    for group, model in groups:
        lines += ["", f"[{group}]"]
        section = file_values.get(group, {})
        for name, value in model:
            lines += _entry(model, name, value, (group, name), section, env)
    lines += _other_variables(environ)
    return "\n".join(lines) + "\n"


def _entry(
    model: BaseModel,
    name: str,
    value: Any,
    path: tuple[str, ...],
    file_values: Mapping[str, Any],
    env: Mapping[str, str],
) -> list[str]:
    description = type(model).model_fields[name].description
    comment = [f"# {description}"] if description else []
    if value is None:  # TOML has no null: leave the key commented out
        return [*comment, f"# {name} =  (unset)"]
    env_names = [ENV_PREFIX + "__".join(path[:i]).upper() for i in range(len(path), 0, -1)]
    source = next((f"  # from ${env[n]}" for n in env_names if n in env), "")
    if not source and name in file_values:
        source = "  # from the config file"
    shown, hidden = _masked(value, _is_secret(name))
    if hidden:
        # Commented out: pasted back into the config file, a masked value would replace
        # the real secret.
        count = f"{len(value)} set, " if isinstance(value, list | tuple) else ""
        return [*comment, f"# {name} = {_toml(shown)}  ({count}hidden){source}"]
    return [*comment, f"{name} = {_toml(shown)}{source}"]


def _other_variables(environ: Mapping[str, str]) -> list[str]:
    """The project's RULEKEEPER_* variables that are not settings, when set (commented out:
    they do not belong in the config file)."""
    names = sorted(name for name in environ if name.upper() in NON_SETTING_VARIABLES)
    if not names:
        return []
    lines = ["", "# Read from the environment too (not settings):"]
    for name in names:
        shown, hidden = _masked(environ[name], _is_secret(name))
        lines.append(f"# {name} = {_toml(shown)}{'  (hidden)' if hidden else ''}")
    return lines


def _is_secret(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def _masked(value: Any, secret: bool) -> tuple[Any, bool]:
    """The value to show, secrets masked (a model becomes a dict), and whether any was."""
    if isinstance(value, BaseModel):
        fields = {name: _masked(item, _is_secret(name)) for name, item in value}
        return {name: shown for name, (shown, _) in fields.items()}, any(
            hidden for _, hidden in fields.values()
        )
    if isinstance(value, list | tuple):
        items = [_masked(item, secret) for item in value]
        return [shown for shown, _ in items], any(hidden for _, hidden in items)
    if isinstance(value, str):
        text = _mask(value) if secret else _url_without_password(value)
        return text, text != value
    return value, False


def _mask(secret: str) -> str:
    """The first few characters, enough to tell keys apart, never more than a quarter."""
    return secret[: min(4, len(secret) // 4)] + "…"


def _url_without_password(value: str) -> str:
    """A URL's password masked (redis://:pass@host/0 -> redis://:pa…@host/0); other text as is."""
    try:
        parts = urlsplit(value)
        password = parts.password
    except ValueError:  # not a URL after all (an unclosed "[" for an IPv6 host)
        return value
    if not password:
        return value
    host = parts.netloc.rpartition("@")[2]
    user = parts.netloc.rpartition("@")[0].partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{_mask(password)}@{host}"))


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, Mapping):  # a model in a list, e.g. a publishable key: inline table
        pairs = (f"{k} = {_toml(v)}" for k, v in value.items() if v is not None)
        return "{ " + ", ".join(pairs) + " }"
    # Anything else (a path, an IP network) as its text. JSON string escapes are valid TOML
    # basic-string escapes.
    return json.dumps(value if isinstance(value, str) else str(value), ensure_ascii=False)
