import re
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner, Result

from cli.errors import ExitCode
from cli.main import app
from cli.state import CliState
from rag.errors import RulekeeperError
from rag.settings import (
    ENV_PREFIX,
    MAX_QUESTION_CHARS,
    NON_SETTING_VARIABLES,
    Settings,
    load_settings,
)


def test_defaults_put_state_under_home(home: Path) -> None:
    settings = load_settings()
    assert settings.home == home
    assert settings.index_dir == home / "index"
    assert settings.model_dir == home / "models"
    assert settings.retrieval.mode == "hybrid"


def test_config_file_then_environment_then_overrides(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home.mkdir()
    (home / "config.toml").write_text(
        '[retrieval]\nk = 7\nmode = "dense"\n[generation]\nbackend = "extractive"\n'
    )
    settings = load_settings()
    assert (settings.retrieval.k, settings.retrieval.mode) == (7, "dense")
    monkeypatch.setenv("RULEKEEPER_RETRIEVAL__K", "9")
    assert load_settings().retrieval.k == 9
    assert load_settings().generation.backend == "extractive"
    assert load_settings(models_dir=home / "m").model_dir == home / "m"


def test_explicit_config_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    config = tmp_path / "other.toml"
    config.write_text("[generation]\nthreads = 1\n")
    monkeypatch.setenv("RULEKEEPER_CONFIG", str(config))
    assert load_settings().generation.threads == 1


def test_invalid_config_is_a_clear_error(home: Path) -> None:
    home.mkdir()
    (home / "config.toml").write_text("[retrieval\nk = ")
    with pytest.raises(RulekeeperError, match="not valid TOML"):
        load_settings()


def test_invalid_value_is_rejected(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RULEKEEPER_RETRIEVAL__MODE", "psychic")
    with pytest.raises(ValueError, match="mode"):
        Settings()
    wanted = r"Invalid setting retrieval\.mode = 'psychic'.*RULEKEEPER_RETRIEVAL__MODE"
    with pytest.raises(RulekeeperError, match=wanted):
        load_settings()


# --- unknown keys: a typo fails in one line naming where it is and what was meant -----------


def _config(home: Path, text: str) -> Path:
    home.mkdir(exist_ok=True)
    path = home / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _rules_config() -> Result:
    # No pipeline injected: the settings come from RULEKEEPER_HOME as a user's would.
    return CliRunner().invoke(app, ["config"], obj=CliState())


def _assert_one_line_error(result: Result, message: str) -> None:
    assert result.exit_code == ExitCode.USER_ERROR, result.output
    assert isinstance(result.exception, SystemExit)  # not a traceback
    assert result.stderr.strip().splitlines() == [f"Error: {message}"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[generation]\ntemprature = 0.2\n", "unknown setting generation.temprature "
         "(did you mean generation.temperature?)"),
        ("temperature = 0.2\n",
         "unknown setting temperature (did you mean generation.temperature?)"),
        ("[retrieval]\nK = 9\n", "unknown setting retrieval.K (did you mean retrieval.k?)"),
        ('[[api.publishable_keys]]\nkey = "pk_1"\norigin = ["https://shop.example"]\n',
         "unknown setting api.publishable_keys[0].origin "
         "(did you mean api.publishable_keys[0].origins?)"),
        # A key that moved to another group names its new place.
        ('[generation]\nbase_url = "http://gpu:8080/v1"\n',
         "setting generation.base_url has moved to openai.chat_url"),
        ("[generation]\nretries = 5\n", "setting generation.retries has moved to openai.retries"),
        ('[embedding]\nbase_url = "http://gpu:8081/v1"\n',
         "setting embedding.base_url has moved to openai.embedding_url"),
    ],
)  # fmt: skip
def test_an_unknown_key_in_the_config_file_names_the_file_and_the_nearest_key(
    home: Path, text: str, problem: str
) -> None:
    path = _config(home, text)
    message = f"{path}: {problem}"
    with pytest.raises(RulekeeperError) as raised:
        load_settings()
    assert str(raised.value) == message
    _assert_one_line_error(_rules_config(), message)


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("RULEKEEPER_GENERATION__TEMPRATURE", "0.2",
         "unknown setting generation.temprature "
         "(did you mean RULEKEEPER_GENERATION__TEMPERATURE?)"),
        ("RULEKEEPER_RETRIEVL__K", "8",
         "unknown setting retrievl.k (did you mean RULEKEEPER_RETRIEVAL__K?)"),
        # pydantic-settings itself ignores an unknown top-level variable.
        ("RULEKEEPER_HOMEDIR", "/tmp/x",
         "unknown setting homedir (did you mean RULEKEEPER_HOME?)"),
        ("RULEKEEPER_CONFG", "/tmp/x.toml",
         "unknown setting confg (did you mean RULEKEEPER_CONFIG?)"),
        ("RULEKEEPER_GENERATION", '{"temprature": 0.2}',
         "unknown setting generation.temprature (did you mean generation.temperature?)"),
        ("RULEKEEPER_GENERATION__TIMEOUT_S", "90", "setting generation.timeout_s has moved to "
         "openai.timeout_s (RULEKEEPER_OPENAI__TIMEOUT_S)"),
        ("RULEKEEPER_GENERATION", '{"base_url": "http://gpu:8080/v1"}',
         "setting generation.base_url has moved to openai.chat_url"),
    ],
)  # fmt: skip
def test_an_unknown_variable_names_itself_and_the_nearest_key(
    home: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, problem: str
) -> None:
    monkeypatch.setenv(variable, value)
    message = f"{variable}: {problem}"
    with pytest.raises(RulekeeperError) as raised:
        load_settings()
    assert str(raised.value) == message
    _assert_one_line_error(_rules_config(), message)


def test_a_moved_key_passed_by_code_names_its_new_place(home: Path) -> None:
    with pytest.raises(RulekeeperError) as raised:
        load_settings(generation={"retry_backoff_s": 1.0})
    assert str(raised.value) == (
        "The setting generation.retry_backoff_s has moved to openai.retry_backoff_s."
    )


def test_the_server_settings_reach_the_server(home: Path) -> None:
    from rag.openai_server import server_for

    _config(home, '[openai]\nchat_url = "http://gpu:8080/v1/"\nretries = 0\ntimeout_s = 5\n')
    settings = load_settings()
    server = server_for(settings.openai.chat_url, settings)
    assert server.base_url == "http://gpu:8080/v1"
    assert (server._retries, server._timeout_s) == (0, 5.0)


# --- shared limits: a setting narrowing one cannot widen it ------------------------------


def test_the_api_question_limit_is_bounded_by_the_one_every_front_end_shares(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from api.warm_service import local_settings

    monkeypatch.setenv("RULEKEEPER_API__MAX_QUESTION_CHARS", str(MAX_QUESTION_CHARS + 1))
    with pytest.raises(RulekeeperError, match=r"^Invalid setting api\.max_question_chars"):
        load_settings()
    monkeypatch.setenv("RULEKEEPER_API__MAX_QUESTION_CHARS", "100")
    settings = load_settings()
    assert settings.api.max_question_chars == 100
    # The local service answers one player as the command line does: the shared limit.
    served = local_settings(settings, "token").api
    assert served.max_question_chars == MAX_QUESTION_CHARS


_ROOT = Path(__file__).resolve().parent.parent
# Names in prose, not variables anyone sets.
_PLACEHOLDERS = {"RULEKEEPER_GROUP__KEY"}


def _is_setting(variable: str) -> bool:
    model: type[BaseModel] = Settings
    *groups, leaf = variable.removeprefix(ENV_PREFIX).lower().split("__")
    for group in groups:
        annotation = model.model_fields[group].annotation if group in model.model_fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return False
        model = annotation
    return leaf in model.model_fields


def test_the_projects_own_variables_are_accepted(
    home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Every RULEKEEPER_* variable the project names (code, scripts, CI, docs) is a setting or
    # declared as a variable that is not one; this file's misspellings aside.
    sources = [_ROOT / "README.md", _ROOT / ".ci" / "run"]
    for folder in ("rag", "cli", "api", "eval", "bench", "scripts", "tests", ".ci", "docs"):
        sources += (_ROOT / folder).rglob("*.*")
    named = set()
    for source in sources:
        if source.suffix in {".py", ".sh", ".md", ".toml", ""} and source != Path(__file__):
            named |= set(re.findall(r"RULEKEEPER_[A-Z0-9_]*[A-Z0-9]", source.read_text("utf-8")))
    named -= _PLACEHOLDERS
    assert {"RULEKEEPER_HOME", "RULEKEEPER_LLAMA_CMAKE_ARGS"} <= named  # the scan found them
    assert [v for v in sorted(named) if v not in NON_SETTING_VARIABLES and not _is_setting(v)] == []
    # Set together, none is taken for a misspelt setting.
    for variable in NON_SETTING_VARIABLES:
        monkeypatch.setenv(variable, str(tmp_path / "unused"))
    monkeypatch.setenv("RULEKEEPER_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("RULEKEEPER_OPENAI_API_KEY", "sk-test")
    settings = load_settings()
    assert settings.home == home and settings.model_dir == tmp_path / "models"
    # ...while the check is on: a near miss among them is still refused.
    monkeypatch.setenv("RULEKEEPER_OPENAI_API_KEYS", "sk-test")
    with pytest.raises(RulekeeperError, match=r"did you mean RULEKEEPER_OPENAI_API_KEY\?"):
        load_settings()


# --- `rules config` with every kind of value, secrets masked ----------------------------------


def test_config_shows_keys_and_proxies_with_secrets_masked(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _config(
        home,
        "[api]\n"
        'api_keys = ["sk_live_secret_0123456789"]\n'
        'trusted_proxies = ["10.0.0.0/8", "192.168.1.1"]\n'
        'redis_url = "redis://:hunter2hunter2@cache.internal:6379/0"\n'
        "[[api.publishable_keys]]\n"
        'key = "pk_live_abcdefghijklmnop"\n'
        'origins = ["https://shop.example"]\n',
    )
    monkeypatch.setenv("RULEKEEPER_OPENAI_API_KEY", "sk-openai-0123456789")
    result = _rules_config()
    assert result.exit_code == 0, result.output
    assert result.exception is None
    out = result.stdout
    api = tomllib.loads(out)["api"]  # still pasteable into the config file
    assert api["trusted_proxies"] == ["10.0.0.0/8", "192.168.1.1/32"]
    assert "trusted_proxies = " in out and "# from the config file" in out
    for secret in ("sk_live_secret_0123456789", "pk_live_abcdefghijklmnop", "hunter2hunter2",
                   "sk-openai-0123456789"):  # fmt: skip
        assert secret not in out
    assert '"sk_l…"' in out and '{ key = "pk_l…", origins = ["https://shop.example"] }' in out
    assert '"redis://:hun…@cache.internal:6379/0"' in out and '"sk-o…"' in out
    # Masked values are shown commented out: pasted back, they would replace the real ones.
    assert "api_keys" not in api and "publishable_keys" not in api and "redis_url" not in api
