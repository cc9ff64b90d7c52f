"""`rules config`'s views of the settings: the effective ones as TOML one can paste into the
config file, each key with its description and, when it is not the default, where its value
came from; and (`--reference`) the reference of every setting, read from the settings model."""

from __future__ import annotations

import json
import os
import re
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, TypeGuard, Union, get_args, get_origin
from urllib.parse import urlsplit, urlunsplit

import annotated_types
from pydantic import BaseModel, IPvAnyNetwork
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from rag.settings import ENV_PREFIX, NON_SETTING_VARIABLES, PROJECT_ROOT, Settings

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


# --- the reference: docs/configuration.md --------------------------------------------------

_REFERENCE_HEAD = """\
# Configuration reference

<!-- Generated from the settings model (rag/settings.py) by `python -m cli.reference`; edit
the model's descriptions, not this page. `rules config --reference` prints the same. -->

Rulekeeper has one settings object. Each setting comes from, highest first:

1. an environment variable: the key's name in capitals after `{prefix}` for a top-level
   setting (`{top}`), with `{sep}` between a group and its key for one in a group
   (`{prefix}GROUP{sep}KEY`); a list or a table is given as JSON;
2. the config file, TOML, each group a table (`[group]`, then `key = value` lines):
   `$RULEKEEPER_CONFIG`, else `config.toml` in `$RULEKEEPER_HOME` (default
   `~/.rulekeeper/config.toml`);
3. the default listed here.

A key in the file or a `{prefix}*` variable that names no setting is refused, with the nearest
valid one. `rules config` prints the settings in effect, as TOML one can paste into the file,
and where each came from; `rules config --path`, the config file it reads.
"""

# Types whose class name says little to a reader.
_TYPE_NAMES: dict[Any, str] = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    Path: "path",
    IPvAnyNetwork: "IP address or network",
}
_BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "length ≥"))


def settings_reference(settings: type[BaseSettings] = Settings) -> str:
    """Every setting of the model, group by group: its type and bounds, default, environment
    variable and description, as Markdown (docs/configuration.md)."""
    prefix = settings.model_config.get("env_prefix", "")
    separator = settings.model_config.get("env_nested_delimiter") or "__"
    others = ", ".join(f"`{name}`" for name in sorted(NON_SETTING_VARIABLES))
    top = next(n for n, f in settings.model_fields.items() if not _is_group(f.annotation))
    head = _REFERENCE_HEAD.format(prefix=prefix, sep=separator, top=prefix + top.upper())
    lines = [head + f"\nVariables the project reads that are not settings: {others}.\n"]
    for group, model in _groups(settings, ()):
        title = f"`[{'.'.join(group)}]`" if group else "Top-level settings"
        lines += [f"## {title}", ""]
        if group and model.__doc__:
            lines += [" ".join(model.__doc__.split()), ""]
        for name, field in model.model_fields.items():
            if not _is_group(field.annotation):
                variable = prefix + separator.join((*group, name)).upper()
                lines += _reference_entry((*group, name), field, variable)
    return "\n".join(lines).rstrip() + "\n"


def _is_group(annotation: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _groups(
    model: type[BaseModel], path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], type[BaseModel]]]:
    """The model and every group within it, depth first, each with its path."""
    yield path, model
    for name, field in model.model_fields.items():
        group = field.annotation
        if _is_group(group):
            yield from _groups(group, (*path, name))


def _reference_entry(path: tuple[str, ...], field: FieldInfo, variable: str) -> list[str]:
    facts = [_type_text(field.annotation), *_bounds(field)]
    default = _default_text(field)
    lines = [
        f"### `{'.'.join(path)}`",
        "",
        f"{', '.join(facts)}; default {default}; `{variable}`",
        "",
    ]
    if field.description:
        lines += [field.description, ""]
    item = get_args(field.annotation)[0] if get_origin(field.annotation) is list else None
    if _is_group(item):
        lines += ["Each table has:", ""]
        for name, inner in item.model_fields.items():
            kind = ", ".join([_type_text(inner.annotation), *_bounds(inner)])
            lines.append(f"- `{name}` ({kind}): {inner.description or ''}".rstrip(": "))
        lines.append("")
    return lines


def _type_text(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(f"`{_toml(arg)}`" for arg in args)
    if origin in (Union, types.UnionType):
        kinds = [_type_text(arg) for arg in args if arg is not type(None)]
        return " or ".join(kinds) + (", or unset" if type(None) in args else "")
    if origin is list:
        (item,) = args
        return "list of tables" if _is_group(item) else f"list of {_type_text(item)}"
    return _TYPE_NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _bounds(field: FieldInfo) -> list[str]:
    found = []
    for constraint in field.metadata:
        if isinstance(constraint, annotated_types.BaseMetadata):
            found += [
                f"{sign} {getattr(constraint, name)}"
                for name, sign in _BOUNDS
                if getattr(constraint, name, None) is not None
            ]
    return found


def _default_text(field: FieldInfo) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "none (required)"
    if field.default_factory is None:
        value = field.default
    else:
        # A default as a fresh installation has it: `home`'s reads RULEKEEPER_HOME, which is
        # the variable that sets `home` itself.
        ours = [name for name in os.environ if name.upper().startswith(ENV_PREFIX)]
        saved = {name: os.environ.pop(name) for name in ours}
        try:
            value = field.get_default(call_default_factory=True, validated_data={})
        finally:
            os.environ.update(saved)
    if value is None:
        return "unset"
    if isinstance(value, Path):
        return f"`{_shown_path(value)}`"
    return f"`{_toml(value)}`"


def _shown_path(path: Path) -> str:
    """A default path as it reads on any machine: within the project, or under `~`."""
    for root, shown in ((PROJECT_ROOT, "<project>"), (Path.home(), "~")):
        if path.is_relative_to(root):
            return (Path(shown) / path.relative_to(root)).as_posix()
    return path.as_posix()
