from pathlib import Path

import pytest

from rag.errors import RulekeeperError
from rag.settings import Settings, load_settings


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
