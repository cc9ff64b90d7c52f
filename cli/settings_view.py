"""`rules config`'s view of the effective settings: TOML one can paste into the config file,
each key with its description and, when it is not the default, where its value came from."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

ENV_PREFIX = "RULEKEEPER_"
# Printed as a count, never as values: terminals get screenshotted and logs get shared.
SECRET_FIELDS = frozenset({"api_keys"})


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
    if name in SECRET_FIELDS:
        return [*comment, f"# {name} =  ({len(value)} set, hidden){source}"]
    return [*comment, f"{name} = {_toml(value)}{source}"]


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    # JSON string escapes are valid TOML basic-string escapes.
    return json.dumps(str(value) if isinstance(value, Path) else value, ensure_ascii=False)
