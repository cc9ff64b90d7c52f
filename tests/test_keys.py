"""`rules keys new`: a strong key, and config lines that, pasted, make the API accept it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from starlette.datastructures import Headers
from typer.testing import CliRunner, Result

from api.security import ApiKeys
from cli.errors import ExitCode
from cli.main import app
from rag.settings import load_settings


def _keys(*args: str) -> Result:
    return CliRunner().invoke(app, ["keys", "new", *args])


def _pasted(result: Result, home: Path) -> ApiKeys:
    """The printed lines pasted into the config file, as the API server would load them."""
    assert result.exit_code == 0, result.output
    config = result.stdout.split("\n\n", 1)[1]
    (home / "config.toml").parent.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(config, encoding="utf-8")
    return ApiKeys.configured(load_settings().api)


def _from(origin: str) -> Headers:
    return Headers({"origin": origin})


def test_a_secret_key_is_strong_and_its_lines_turn_it_on(home: Path) -> None:
    result = _keys()
    key = result.stdout.splitlines()[0]
    assert key.startswith("sk_") and len(key) >= 40
    assert key != _keys().stdout.splitlines()[0]  # drawn anew each time
    keys = _pasted(result, home)
    grant = keys.grant(key)
    assert grant is not None and grant.secret and grant.allows(_from("https://any.example"))
    assert keys.grant(key[:-1]) is None
    assert f"RULEKEEPER_API__API_KEYS='[\"{key}\"]'" in result.stdout


def test_a_publishable_key_is_bound_to_its_origins(home: Path) -> None:
    result = _keys(
        "--publishable", "--origin", "https://Shop.Example/", "--origin", "http://localhost:8080"
    )
    key = result.stdout.splitlines()[0]
    assert key.startswith("pk_")
    keys = _pasted(result, home)
    grant = keys.grant(key)
    assert grant is not None and not grant.secret
    assert grant.allows(_from("https://shop.example"))
    assert grant.allows(_from("http://localhost:8080"))
    assert not grant.allows(_from("https://evil.example"))
    assert keys.origins == ["http://localhost:8080", "https://shop.example"]
    assert tomllib.loads(result.stdout.split("\n\n", 1)[1])["api"]["publishable_keys"][0] == {
        "key": key,
        "origins": ["https://shop.example", "http://localhost:8080"],
    }


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--publishable"], "needs the page's --origin"),
        (["--origin", "https://shop.example"], "add --publishable"),
        (["--publishable", "--origin", "shop.example"], "is not an origin"),
        (["--publishable", "--origin", "https://shop.example/widget"], "has a path"),
    ],
)
def test_keys_new_refuses_what_would_not_work(home: Path, args: list[str], says: str) -> None:
    result = _keys(*args)
    assert result.exit_code == ExitCode.USAGE
    assert says in result.stderr and not result.stdout
