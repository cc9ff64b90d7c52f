"""The README and docs/ say what is true: every file they name exists, every `rules` command
and option they name is real, every link lands on a heading, and the pages generated from
the code (docs/configuration.md, the second half of docs/api.md) are current."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
import typer
from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from typer.testing import CliRunner

from cli.main import app
from cli.reference import REGENERATE, api_reference, openapi_spec, pages
from cli.settings_view import settings_reference
from rag.settings import Settings, default_home

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A path is checked when it starts at one of the repository's own folders; `HOME/...`,
# `~/...` and URLs name other places.
_REPO_FOLDERS = "rag|cli|api|eval|bench|scripts|docs|corpus|tests|\\.ci"
_PATH = re.compile(rf"(?<![\w./~$:-])((?:{_REPO_FOLDERS})/[\w./<>*${{}}-]*)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+)`")


def named_paths(text: str) -> set[str]:
    """Repository paths a page names, in prose or code; placeholders (`<slug>`, `$g`) and
    trailing punctuation left out."""
    found = {match.rstrip(".,:") for match in _PATH.findall(text)}
    return {path for path in found if not set(path) & set("<>*${}")}


def links(text: str) -> Iterator[tuple[str, str]]:
    """(file, anchor) of each relative Markdown link; file "" for one within the page."""
    for target in _LINK.findall(text):
        if not re.match(r"[a-z]+:", target):
            file, _, anchor = target.partition("#")
            yield file, anchor


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces
    as hyphens (code blocks hold no headings)."""
    headings = re.findall(r"^#{1,6} (.+)$", _FENCE.sub("", text), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def code_snippets(text: str) -> Iterator[str]:
    """Each line of a fenced block and each inline code span."""
    for block in _FENCE.findall(text):
        yield from block.splitlines()
    yield from _SPAN.findall(_FENCE.sub("", text))


def rules_invocations(text: str) -> Iterator[list[str]]:
    """The words after each `rules` in the page's code, up to the end of its command."""
    for snippet in code_snippets(text):
        for command in re.split(r"[;&|]|\\\|", snippet):
            words = command.split()
            for i, word in enumerate(words):
                if word == "rules":
                    yield [w.strip("[]") for w in words[i + 1 :]]


def resolve(root: Any, words: list[str]) -> tuple[list[str], Any]:
    """The subcommand path the words name, and the (click) command it leads to."""
    path, command = [], root
    for word in words:
        if word not in getattr(command, "commands", {}):  # a group has subcommands
            break
        path.append(word)
        command = command.commands[word]
    return path, command


def options_of(command: Any) -> set[str]:
    return {"--help"} | {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


# --- the generated pages -------------------------------------------------------------------


def test_the_generated_pages_are_current(home: Path) -> None:
    for path, text in pages().items():
        assert path.is_file(), f"{_page_id(path)} is missing: run `{REGENERATE}`"
        current = path.read_text(encoding="utf-8")
        assert current == text, f"{_page_id(path)} is out of date: run `{REGENERATE}`"


class _Key(BaseModel):
    key: str = Field(min_length=1, description="The key.")


class _Group(BaseModel):
    """A group's own words."""

    mode: Literal["fast", "slow"] = Field("fast", description="How it goes.")
    limit: int = Field(5, ge=1, le=50, description="At most this many.")
    seed: int | None = Field(None, description="Unset: random.")
    keys: list[_Key] = Field(default_factory=list, description="Keys for pages.")


class _Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TINY_", env_nested_delimiter="__")

    home: Path = Field(default_factory=default_home, description="State.")
    group: _Group = _Group()


def test_the_settings_reference_is_read_from_the_model(home: Path) -> None:
    page = settings_reference(_Settings)
    assert "## `[group]`\n\nA group's own words.\n" in page
    assert (
        "### `group.limit`\n\ninteger, ≥ 1, ≤ 50; default `5`; `TINY_GROUP__LIMIT`\n\n"
        "At most this many.\n"
    ) in page
    assert 'one of `"fast"`, `"slow"`; default `"fast"`; `TINY_GROUP__MODE`' in page
    assert "integer, or unset; default unset; `TINY_GROUP__SEED`" in page
    assert "list of tables; default `[]`" in page
    assert "- `key` (string, length ≥ 1): The key." in page
    # A default as on a fresh installation, whatever this process's environment says, and
    # the environment left as it was.
    assert "path; default `~/.rulekeeper`; `TINY_HOME`" in page
    assert Path(os.environ["RULEKEEPER_HOME"]) == home


def test_rules_config_reference_prints_the_configuration_page(home: Path) -> None:
    result = CliRunner().invoke(app, ["config", "--reference"])
    assert result.exit_code == 0, result.output
    assert result.output == (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")


def test_the_api_reference_covers_every_route_and_request_field(home: Path) -> None:
    spec = openapi_spec()
    page = api_reference(spec)
    for path, operations in spec["paths"].items():
        for method in operations:
            assert f"### `{method.upper()} {path}`" in page
    assert re.search(r"\| `question` \| string, length ≥ 1, length ≤ \d+, required \|", page)
    assert "| 401 | A valid API key is required. |" in page  # documented with keys on
    assert "HTTPValidationError" not in page  # FastAPI's shape, which this API never sends


# --- what the pages name -------------------------------------------------------------------


def test_the_path_finder_finds_paths_and_skips_other_places() -> None:
    text = (
        "Run `scripts/setup.sh`, see [x](docs/api.md#auth) and eval/RESULTS.md. Not "
        "`HOME/renderings/`, `~/.rulekeeper/models`, https://host/api/x, `/v1/games`, "
        "`corpus/<slug>/manifest.toml` or `eval/gold/$g.jsonl`."
    )
    assert named_paths(text) == {"scripts/setup.sh", "docs/api.md", "eval/RESULTS.md"}
    assert list(links("[a](api.md#keys) [b](#top) [c](https://x.org/a.md)")) == [
        ("api.md", "keys"),
        ("", "top"),
    ]
    assert anchors("# Top\n## The `POST /v1/ask` route\n```\n# not a heading\n```") == {
        "top",
        "the-post-v1ask-route",
    }


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_file_a_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    missing = sorted(p for p in named_paths(text) if not (ROOT / p).exists())
    assert not missing, f"{_page_id(page)} names files that do not exist: {missing}"
    for file, anchor in links(text):
        target = (page.parent / file).resolve() if file else page
        assert target.exists(), f"{_page_id(page)} links to a missing {file}"
        if anchor and target.suffix == ".md":
            wanted = anchors(target.read_text(encoding="utf-8"))
            assert anchor in wanted, f"{_page_id(page)}: no heading #{anchor} in {file}"


def test_the_pages_name_the_main_files() -> None:
    """The finder is not blind: the README names the setup script and the results."""
    named = named_paths((ROOT / "README.md").read_text(encoding="utf-8"))
    assert {"scripts/setup.sh", "eval/RESULTS.md", "docs/eval-format.md"} <= named


def test_the_command_finder_reads_code_only() -> None:
    text = (
        "The rules ask a lot. Run `rules ask QUESTION [--game G]` or\n"
        "```bash\nrules models fetch x --defaults; rules eval --gold a.jsonl  # c\n```\n"
        "| `rules service status\\|stop` |"
    )
    assert list(rules_invocations(text)) == [
        ["models", "fetch", "x", "--defaults"],
        ["eval", "--gold", "a.jsonl", "#", "c"],
        ["ask", "QUESTION", "--game", "G"],
        ["service", "status"],
    ]


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_rules_command_a_page_names_is_real(page: Path, home: Path) -> None:
    root = typer.main.get_command(app)
    runner = CliRunner()
    checked: set[tuple[str, ...]] = set()
    for words in rules_invocations(page.read_text(encoding="utf-8")):
        if not words:
            continue  # `rules` alone, the command's name
        path, command = resolve(root, words)
        named = path or words[0].startswith("-")  # `rules --help` names options only
        assert named, f"{_page_id(page)}: `rules {' '.join(words)}` names no command"
        given = {w.split("=")[0] for w in words[len(path) :] if w.startswith("--")}
        unknown = given - options_of(command)
        assert not unknown, f"{_page_id(page)}: `rules {' '.join(path)}` has no {unknown}"
        if tuple(path) not in checked:
            checked.add(tuple(path))
            result = runner.invoke(app, [*path, "--help"])
            assert result.exit_code == 0, f"rules {' '.join(path)} --help: {result.output}"


def setting_keys(model: type[BaseModel] = Settings, group: str = "") -> set[str]:
    """Every setting's dotted key, groups within groups included."""
    keys = set()
    for name, field in model.model_fields.items():
        key = f"{group}{name}"
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= setting_keys(annotation, f"{key}.")
        keys.add(key)
    return keys


def named_settings(text: str) -> set[str]:
    """The dotted keys in a page's code spans that start with a settings group's name (not
    a module, `api.app:create_app`, nor a file, `HOME/service.json`)."""
    groups = {key.partition(".")[0] for key in setting_keys() if "." in key}
    dotted = r"(?<![\w/.])[a-z_]+(?:\.[a-z_]+)+(?![\w:/(])"
    found = {key for span in _SPAN.findall(text) for key in re.findall(dotted, span)}
    return {key for key in found if key.partition(".")[0] in groups}


def test_the_settings_finder_finds_settings_only() -> None:
    text = "`retrieval.k`, `api.nope = 1`, `api.app:create_app`, `HOME/service.json`, k.x"
    assert named_settings(text) == {"retrieval.k", "api.nope"}
    assert named_settings((ROOT / "README.md").read_text(encoding="utf-8"))  # not blind


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_setting_a_page_names_is_real(page: Path) -> None:
    unknown = named_settings(page.read_text(encoding="utf-8")) - setting_keys()
    assert sorted(unknown) == [], f"{_page_id(page)} names settings that do not exist"


def test_the_readme_names_the_commands_a_player_needs() -> None:
    named = {
        tuple(resolve(typer.main.get_command(app), words)[0])
        for words in rules_invocations((ROOT / "README.md").read_text(encoding="utf-8"))
    }
    wanted = {("ask",), ("chat",), ("games",), ("show",), ("add",), ("eval",), ("serve",)}
    assert wanted <= named


def test_the_eval_format_is_cited_where_it_is() -> None:
    """The format's page is docs/eval-format.md, in the repository; nothing cites the old
    place outside it."""
    old = "shared/" + "eval-format.md"
    sources = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    for folder in ("rag", "cli", "api", "eval", "bench", "tests"):
        sources += (ROOT / folder).rglob("*.py")
    citing = [_page_id(s) for s in sources if old in s.read_text(encoding="utf-8")]
    assert citing == []
