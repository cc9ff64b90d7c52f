"""Adding a big rulebook: the estimate first, --yes past the limit, progress lines in a pipe,
and an add killed mid-build left out, said so, and finished or removed on request."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder, ScriptedGenerator, on_fake_scale
from test_service import ok, rules, service_env
from typer.testing import CliRunner, Result

from cli.errors import ExitCode
from cli.main import app
from cli.state import CliState
from rag.pipeline import Pipeline
from rag.searching.index import DEFAULT_SECONDS_PER_TEXT
from rag.settings import Settings

SECTIONS = 60  # passages: several batches of the embedder's
INTERRUPTED = "finish with `rules index` or `rules remove big`"


@pytest.fixture
def big_book(tmp_path: Path) -> Path:
    path = tmp_path / "big.md"
    sections = (
        f"## Rule {n}\n\nOn turn {n} each player draws a card. A drawn card goes to the hand.\n"
        for n in range(SECTIONS)
    )
    path.write_text("# Big\n\n" + "\n".join(sections), encoding="utf-8")
    return path


def _invoke(pipeline: Pipeline, *args: str) -> Result:
    return CliRunner().invoke(app, list(args), obj=CliState(lambda: pipeline))


def _limited(pipeline: Pipeline, minutes: float) -> Pipeline:
    embedding = pipeline.settings.embedding.model_copy(update={"add_confirm_minutes": minutes})
    settings = pipeline.settings.model_copy(update={"embedding": embedding})
    return Pipeline(settings, embedder=pipeline.embedder, generator=pipeline.generator)


def test_add_states_what_it_embeds_and_how_long_before_it_starts(
    pipeline: Pipeline, big_book: Path
) -> None:
    plan = pipeline.plan_book(big_book, "Big")
    assert not plan.measured and plan.passages == SECTIONS  # no build here has been timed
    assert plan.seconds == pytest.approx(  # each sentence alone and under its section's name
        (plan.passages + 2 * plan.sentences) * DEFAULT_SECONDS_PER_TEXT
    )
    pipeline.ensure_index()  # the built-in books: enough texts to time the embedder on
    plan = pipeline.plan_book(big_book, "Big")
    assert plan.measured and plan.seconds < (plan.passages + plan.sentences) * 0.01

    result = _invoke(pipeline, "add", str(big_book), "--title", "Big")
    assert result.exit_code == 0, result.output
    first = result.stderr.splitlines()[0]
    assert first == f"Big: {SECTIONS} passages and {plan.sentences} sentences to embed, about 1 s."


def test_past_the_limit_add_asks_for_yes_and_writes_nothing(
    pipeline: Pipeline, big_book: Path
) -> None:
    pipeline.ensure_index()
    manifest = pipeline.index_store().manifest_path.read_bytes()
    limited = _limited(pipeline, 1e-6)
    refused = _invoke(limited, "add", str(big_book), "--title", "Big")
    assert refused.exit_code == ExitCode.USER_ERROR
    (line,) = refused.stderr.splitlines()
    assert "embedding.add_confirm_minutes" in line and "add --yes to go ahead" in line
    assert f"{SECTIONS} passages" in line
    assert not pipeline.settings.user_books_dir.exists()
    assert pipeline.index_store().manifest_path.read_bytes() == manifest

    added = _invoke(limited, "add", str(big_book), "--title", "Big", "--yes")
    assert added.exit_code == 0, added.output
    assert "big" in pipeline.index_store().read_manifest()["games"]  # type: ignore[index]


def test_a_piped_add_shows_progress_as_plain_lines(pipeline: Pipeline, big_book: Path) -> None:
    pipeline.ensure_index()
    result = _invoke(pipeline, "add", str(big_book), "--title", "Big")
    assert result.exit_code == 0, result.output
    assert "\x1b[" not in result.stderr and "━" not in result.stderr  # no bar, no colours
    lines = re.findall(r"^Embedding new passages: (\d+)/(\d+) \((\d+)%\)$", result.stderr, re.M)
    done = [int(d) for d, _, _ in lines]
    assert {int(total) for _, total, _ in lines} == {SECTIONS}
    assert done == sorted(done) and done[-1] == SECTIONS and len(done) <= 11
    assert len(done) >= 3  # the first batch, tenths on the way, the end
    assert "Embedding new sentences:" in result.stderr


# --- an add killed mid-build, as a user meets it --------------------------------------------


class StallingEmbedder(FakeEmbedder):
    """Embeds one batch of passages, then stalls: a build to kill in the middle."""

    def __init__(self) -> None:
        super().__init__()
        self.batches = 0

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        if not query:
            self.batches += 1
            if self.batches > 1:
                time.sleep(600)
        return super()._encode(texts, query=query)


def stalling_pipeline(settings: Settings) -> Pipeline:
    """The pipeline_factory of a `rules add` to kill (this module on PYTHONPATH)."""
    return Pipeline(
        on_fake_scale(settings), embedder=StallingEmbedder(), generator=ScriptedGenerator()
    )


def _killed_mid_build(env: dict[str, str], book: Path, tmp_path: Path) -> None:
    """`rules add` killed with -9 once it has embedded a batch of the book's passages."""
    log = tmp_path / "add.log"
    stalling = {**env, "RULEKEEPER_PIPELINE_FACTORY": "test_adding:stalling_pipeline"}
    with log.open("w") as err:
        adding = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "add", str(book), "--title", "Big"],
            cwd=tmp_path, env=stalling, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "Embedding new passages:" not in log.read_text():
            assert adding.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the add never started embedding"
            time.sleep(0.05)
    finally:
        os.kill(adding.pid, signal.SIGKILL)
        adding.wait()


@pytest.mark.slow
def test_a_killed_add_is_left_out_said_so_and_finished_or_removed(
    tmp_path: Path, big_book: Path
) -> None:
    (tmp_path / "home").mkdir()
    env = {**service_env(tmp_path / "home"), "RULEKEEPER_SERVICE__ENABLED": "false"}
    ok(rules(env, "index"))
    manifest = tmp_path / "home" / "index" / "manifest.json"
    before = manifest.read_bytes()

    _killed_mid_build(env, big_book, tmp_path)
    games = ok(rules(env, "games"))
    assert INTERRUPTED in games.stderr and "Embedding" not in games.stderr
    assert "\nbig\t" not in games.stdout
    assert manifest.read_bytes() == before  # nothing was embedded again, unasked
    asked = rules(env, "ask", "how many cards do I draw?", "--game", "big")
    assert asked.returncode == ExitCode.USER_ERROR and INTERRUPTED in asked.stderr
    again = rules(env, "add", str(big_book), "--title", "Big")
    assert again.returncode == ExitCode.USER_ERROR and INTERRUPTED in again.stderr
    assert "interrupted" in ok(rules(env, "doctor")).stdout

    removed = ok(rules(env, "remove", "big"))
    assert "Removed Big (big)." in removed.stdout
    assert "Index built" not in removed.stderr  # it was never in the index: nothing rebuilt
    assert not (tmp_path / "home" / "books" / "big").exists()
    assert INTERRUPTED not in ok(rules(env, "games")).stderr

    _killed_mid_build(env, big_book, tmp_path)
    finished = ok(rules(env, "index"))
    assert "Finished adding Big (big)." in finished.stdout
    assert f"Embedding new passages: {SECTIONS}/{SECTIONS} (100%)" in finished.stderr
    listed = ok(rules(env, "games"))
    assert "\nbig\tBig\t" in listed.stdout and INTERRUPTED not in listed.stderr
    assert "big" in json.loads(manifest.read_text())["games"]
