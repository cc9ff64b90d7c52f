"""The `rules` command line over the real pipeline with conftest's fakes (milliseconds each).

Invocations go through typer's CliRunner with the pipeline injected as the context object;
stdout is not a terminal there, so these also check the plain (piped) output.
"""

from __future__ import annotations

import json
import re
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import FakeEmbedder, ScriptedGenerator
from typer.testing import CliRunner, Result

from cli.commands import models as models_command
from cli.commands.chat import ChatSession, run_chat
from cli.errors import ExitCode
from cli.main import app
from cli.render import stream_answer
from cli.state import CliState
from cli.toc import outline
from cli.ui import Ui
from rag.contents import table_of_contents
from rag.models import DEFAULT_FETCH, ModelSpec
from rag.pipeline import Pipeline
from rag.prompting import Prompt
from rag.settings import Settings
from rag.types import Chunk, StreamEvent, Turn

Invoke = Callable[..., Result]

CONTRACT_KEYS = {
    "question", "game", "lang", "answer", "abstained", "citations", "passages", "timings",
    "backend", "conclusion", "quotes", "checks", "confidence", "follows_up",
}  # fmt: skip


def _invoker(pipeline: Pipeline | None) -> Invoke:
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Result:
        # No pipeline: the real factory (settings from RULEKEEPER_HOME), for commands that
        # never load a model.
        state = CliState(lambda: pipeline) if pipeline else CliState()
        return runner.invoke(app, list(args), obj=state, input=input)

    return invoke


@pytest.fixture
def invoke(pipeline: Pipeline) -> Invoke:
    return _invoker(pipeline)


@pytest.fixture
def invoke_scripted(scripted_pipeline: Pipeline) -> Invoke:
    return _invoker(scripted_pipeline)


@pytest.fixture
def invoke_unpiped(home: Path) -> Invoke:
    return _invoker(None)


# A line of an index build's progress, as a first command in a fresh home shows it in a pipe.
PROGRESS_LINE = re.compile(r"^[A-Z][a-z ]+: \d+/\d+ \(\d+%\)$")


def assert_user_error(result: Result, *fragments: str, code: int = ExitCode.USER_ERROR) -> None:
    """One line on stderr saying what went wrong (after any progress of the index build
    the command began with), the documented code, and no traceback."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit)
    lines = [line for line in result.stderr.strip().splitlines() if not PROGRESS_LINE.match(line)]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


# --- help ------------------------------------------------------------------------------


def test_help_lists_every_command_and_the_exit_codes(invoke: Invoke) -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("ask", "chat", "games", "show", "add", "remove", "index", "doctor",
                    "config", "models"):  # fmt: skip
        assert command in result.output
    assert "Exit codes" in result.output and "--fail-on-abstain" in result.output


def test_usage_errors_exit_2(invoke: Invoke) -> None:
    assert invoke("ask").exit_code == ExitCode.USAGE
    assert invoke("ask", "q", "--k", "0").exit_code == ExitCode.USAGE
    assert invoke("frobnicate").exit_code == ExitCode.USAGE


# --- ask ----------------------------------------------------------------------------------


def test_ask_prints_the_answer_then_the_cited_sections_without_ansi(invoke: Invoke) -> None:
    result = invoke("ask", "How", "many", "actions", "do", "I", "take?", "--game", "MaxApoc")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "\x1b[" not in out
    answer, _, sources = out.partition("Sources (maximum-apocalypse)")
    assert "[1]" in answer and "the rulebook prevails" in answer
    assert "[1] Maximum Apocalypse" in sources  # marker, then the section path
    assert "Answered by extractive" in sources


def test_the_time_printed_is_the_whole_wait(
    invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the command's start (loading and building included), not the pipeline's share."""
    clock = iter([100.0, 124.8])
    monkeypatch.setattr("cli.commands.ask.time", SimpleNamespace(perf_counter=lambda: next(clock)))
    result = invoke("ask", "How does a stealth test work?", "--game", "MaxApoc")
    assert result.exit_code == 0, result.output
    assert "Answered by extractive in 24.80 s." in result.stdout


def test_ask_json_prints_exactly_the_answer_contract(invoke: Invoke, pipeline: Pipeline) -> None:
    question = "How does a stealth test work in Maximum Apocalypse?"
    result = invoke("ask", question, "--json", "--k", "3")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 1  # one object, one line, nothing else
    data = json.loads(result.stdout)
    assert set(data) == CONTRACT_KEYS
    expected = pipeline.ask(question, k=3).to_json()
    assert {**data, "timings": None} == {**expected, "timings": None}
    assert data["game"] == "maximum-apocalypse" and len(data["passages"]) == 3
    cited = {p["chunk_id"] for p in data["passages"]}
    assert all(c["chunk_id"] in cited for c in data["citations"])


def test_ask_user_errors_are_one_line_without_traceback(invoke: Invoke) -> None:
    assert_user_error(invoke("ask", "   ", "--game", "suros"), "question is empty")
    assert_user_error(invoke("ask", "q?", "--game", "chess"), "Unknown game 'chess'", "suros")
    assert_user_error(invoke("ask", "How do I move?"), "Which game?", "maximum-apocalypse")


def test_ask_abstention_exits_0_unless_asked_to_fail(
    invoke_scripted: Invoke, scripted: ScriptedGenerator, settings: Settings
) -> None:
    question = ("What is the hand limit in Maximum Apocalypse?",)
    settings.generation.select = True
    scripted.selections = ['{"ids": []}', '{"ids": []}']  # no sentence answers it
    plain = invoke_scripted("ask", *question)
    assert plain.exit_code == 0
    assert "The rulebook does not say" in plain.stdout
    assert "Nearest passages (maximum-apocalypse)" in plain.stdout
    strict = invoke_scripted("ask", *question, "--fail-on-abstain", "--json")
    assert strict.exit_code == ExitCode.ABSTAINED
    assert json.loads(strict.stdout)["abstained"] is True


class _TerminalUi(Ui):
    """A Ui whose stdout is a terminal, captured."""

    def __init__(self) -> None:
        from io import StringIO

        from rich.console import Console

        self.buffer = StringIO()
        self.__dict__["out"] = Console(file=self.buffer, force_terminal=True, width=100)


def test_terminal_shows_the_rule_text_then_the_draft_then_the_checked_answer(
    scripted_pipeline: Pipeline, scripted: ScriptedGenerator
) -> None:
    # no quote states 99; asked again, the model states it again (the rulebook is not silent)
    scripted.conclusions = ['{"conclusion": "You gain 99 AP."}'] * 2
    ui = _TerminalUi()
    answer = stream_answer(ui, scripted_pipeline.ask_stream("How much AP?", "suros"))
    assert answer.conclusion is None and answer.answer.startswith("Deciding rule: [1]")
    screen = ui.buffer.getvalue()
    assert screen.index("Deciding rule:") < screen.index("99 AP")  # quotes before the draft...
    final_frame = screen.rsplit("\x1b[2K", 1)[-1]  # ...then redrawn with the final answer
    assert "Deciding rule:" in final_frame and "99" not in final_frame


def test_terminal_is_redrawn_only_when_the_answer_changes(
    scripted_pipeline: Pipeline, scripted: ScriptedGenerator
) -> None:
    """While the conclusion is computed the screen stays still: a spinner redrawing the rule
    text would take the cores the model reads its prompt on."""
    events = list(scripted_pipeline.ask_stream("How much AP?", "suros"))

    def slowly() -> Iterator[StreamEvent]:
        for event in events:
            time.sleep(0.3)  # a spinner refreshing 12 times a second would draw 3-4 frames
            yield event

    ui = _TerminalUi()
    stream_answer(ui, slowly())
    frames = ui.buffer.getvalue().count("Deciding rule:")
    assert 2 <= frames <= len(events)  # the rule text, then once per event at most


def test_an_interrupted_answer_closes_the_stream() -> None:
    closed: list[bool] = []

    def events() -> Iterator[StreamEvent]:
        try:
            yield StreamEvent("token", text="Half an ans")
            raise KeyboardInterrupt
        finally:
            closed.append(True)

    with pytest.raises(KeyboardInterrupt):
        stream_answer(_TerminalUi(), events())
    assert closed == [True]


# --- games, show --------------------------------------------------------------------------


def test_games_lists_slugs_aliases_and_chunk_counts_as_tsv(invoke: Invoke) -> None:
    result = invoke("games")
    assert result.exit_code == 0
    header, *rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert header == ["slug", "title", "aliases", "chunks", "source"]
    by_slug = {row[0]: row for row in rows}
    assert set(by_slug) == {"deck52-final-bus", "maximum-apocalypse",
                            "maximum-throwdown-overload", "suros"}  # fmt: skip
    assert "苏罗斯" in by_slug["suros"][2]
    assert all(int(row[3]) > 0 and row[4] == "built-in" for row in rows)


def _toc(invoke: Invoke, game: str) -> dict[int, str]:
    result = invoke("show", game)
    assert result.exit_code == 0, result.output
    _, *rows = [line.split("\t") for line in result.stdout.splitlines()]
    return {int(n): title for n, title in rows}


def test_show_lists_the_table_of_contents_in_reading_order(
    invoke: Invoke, pipeline: Pipeline
) -> None:
    toc = _toc(invoke, "Maximum Apocalypse")
    assert list(toc) == list(range(1, len(toc) + 1))
    paths = list(dict.fromkeys(c.section_path for c in pipeline.chunks("maximum-apocalypse")))
    assert list(toc.values()) == paths


def test_show_finds_a_section_by_number_or_name(invoke: Invoke, pipeline: Pipeline) -> None:
    toc = _toc(invoke, "suros")
    number, title = next((n, t) for n, t in toc.items() if t.endswith("ADJACENCY"))
    by_number = invoke("show", "suros", str(number))
    by_name = invoke("show", "suros", "adjacency")
    assert by_number.exit_code == by_name.exit_code == 0
    assert by_number.stdout == by_name.stdout
    assert by_number.stdout.startswith(f"{number}. {title}")
    assert "Adjacency is determined if two spaces are directly next" in by_number.stdout


def test_show_lists_several_matches_and_explains_none(invoke: Invoke) -> None:
    several = invoke("show", "suros", "attack")
    assert_user_error(several, "'attack' matches")
    listed = [line.split("\t")[1] for line in several.stdout.splitlines()[1:]]
    assert len(listed) > 3 and all("attack" in title.lower() for title in listed)
    # A section named exactly so wins over the sections whose names merely contain it.
    movement = invoke("show", "suros", "movement")
    assert movement.exit_code == 0 and "Suros › MOVEMENT\n" in movement.stdout
    assert_user_error(invoke("show", "suros", "zzz-nothing"), "rules show suros")
    assert_user_error(invoke("show", "suros", "9999"), "No section 9999")
    assert_user_error(invoke("show", "chess"), "Unknown game", "suros")


# --- add, remove, index -------------------------------------------------------------------


def test_add_then_ask_then_remove(invoke: Invoke, rulebook: Path) -> None:
    assert invoke("index").exit_code == 0  # the built-in books' vectors, for the add to reuse
    added = invoke("add", str(rulebook), "--title", "Pebble Race", "--alias", "PR")
    assert added.exit_code == 0, added.output
    assert added.stdout.startswith(
        "Added Pebble Race as pebble-race: 3 sections, 4 sentences, 3 passages, 39 words, English."
    )
    assert "Warning" not in added.stderr
    assert "3 passages embedded, 260 reused" in added.stderr
    assert "rules render zh --game pebble-race" in added.stderr  # Chinese questions, sooner
    assert "pebble-race" in invoke("games").stdout
    asked = invoke("ask", "What happens to a pebble that misses?", "--game", "PR", "--json")
    assert json.loads(asked.stdout)["game"] == "pebble-race"
    removed = invoke("remove", "pebble race")
    assert removed.exit_code == 0 and "Removed Pebble Race" in removed.stdout
    assert "0 passages embedded, 260 reused" in removed.stderr
    assert "pebble-race" not in invoke("games").stdout


def test_add_a_folder_of_markdown_pages(invoke: Invoke, tmp_path: Path) -> None:
    wiki = tmp_path / "wiki"
    wiki.mkdir()
    (wiki / "1-setup.md").write_text("Each player takes five pebbles.\n", encoding="utf-8")
    (wiki / "2-turn.md").write_text("# Taking a Turn\n\nThrow one pebble.\n", encoding="utf-8")
    added = invoke("add", str(wiki), "--title", "Pebble Race")
    assert added.exit_code == 0, added.output
    toc = invoke("show", "pebble-race").stdout
    assert "Setup" in toc and "Taking a Turn" in toc
    assert "Throw one pebble." in invoke("show", "pebble-race", "Taking a Turn").stdout


def test_add_warns_when_a_rulebook_looks_wrongly_read(invoke: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "headless.txt"
    path.write_text("Each player moves the pawn forward by the number rolled. " * 100)
    added = invoke("add", str(path), "--title", "Headless")
    assert added.exit_code == 0, added.output
    assert "Warning: 100% of the text sits in one section" in added.stderr


def test_add_a_chinese_rulebook_in_gbk(invoke: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "pebbles.txt"
    path.write_bytes(
        "一、准备\n每位玩家拿五颗石子。\n二、胜利\n最先用完石子的玩家获胜。\n".encode("gbk")
    )
    added = invoke("add", str(path), "--title", "Pebble Race", "--alias", "石子赛跑")
    assert added.exit_code == 0, added.output
    # 一准备 3, 每位玩家拿五颗石子 9, 二胜利 3, 最先用完石子的玩家获胜 11.
    assert added.stdout.startswith(
        "Added Pebble Race as pebble-race: 2 sections, 2 sentences, 2 passages, 26 characters, "
        "Chinese."
    )
    assert "Warning: Not UTF-8: read pebbles.txt as GB18030" in " ".join(added.stderr.split())
    assert "最先用完石子的玩家获胜。" in invoke("show", "石子赛跑", "二、胜利").stdout


def test_games_lists_english_and_chinese_names_of_added_books(
    invoke: Invoke, rulebook: Path
) -> None:
    assert (
        invoke("add", str(rulebook), "--title", "Pebble Race", "--alias", "石子赛跑").exit_code == 0
    )
    chinese_titled = rulebook.with_name("stones.md")
    chinese_titled.write_text("# 准备\n\n每位玩家拿五颗石子。\n", encoding="utf-8")
    added = invoke("add", str(chinese_titled), "--title", "投石", "--alias", "Stone Toss")
    assert added.exit_code == 0, added.output
    rows = {
        row[0]: row for row in (line.split("\t") for line in invoke("games").stdout.splitlines())
    }
    assert rows["pebble-race"][1:3] == ["Pebble Race", "石子赛跑"]
    assert rows["stone-toss"][1:3] == ["投石", "Stone Toss"]


def test_an_added_pdf_shows_its_pages(invoke: Invoke, tmp_path: Path) -> None:
    canvas_module = pytest.importorskip("reportlab.pdfgen.canvas")
    path = tmp_path / "pebble.pdf"
    canvas = canvas_module.Canvas(str(path))
    for heading, text in (("Setup", "Take five pebbles."), ("Winning", "Empty your hand.")):
        canvas.setFont("Times-Bold", 18)
        canvas.drawString(72, 750, heading)
        canvas.setFont("Times-Roman", 11)
        canvas.drawString(72, 720, text)
        canvas.showPage()
    canvas.save()
    assert invoke("add", str(path), "--title", "Pebble Race").exit_code == 0
    rows = [line.split("\t") for line in invoke("show", "pebble-race").stdout.splitlines()]
    assert rows == [
        ["#", "section", "page"],
        ["1", "Pebble Race › Setup", "1"],
        ["2", "Pebble Race › Winning", "2"],
    ]
    assert "(page 2)" in invoke("show", "pebble-race", "2").stdout


def test_add_and_remove_refuse_with_one_line(invoke: Invoke, rulebook: Path) -> None:
    assert_user_error(invoke("add", "missing.pdf", "--title", "X"), "no such file")
    odd = rulebook.with_suffix(".xyz")
    odd.write_text("text", encoding="utf-8")
    assert_user_error(invoke("add", str(odd), "--title", "Odd"), "unsupported format")
    assert_user_error(invoke("add", str(rulebook), "--title", "Suros"), "already exists")
    assert_user_error(invoke("remove", "suros"), "built-in")


def test_index_builds_and_a_corrupt_index_says_to_rebuild(
    invoke: Invoke, pipeline: Pipeline
) -> None:
    built = invoke("index")
    assert built.exit_code == 0, built.output
    assert "passages from 4 games" in built.stdout and "fake-hash-embedder" in built.stdout
    (pipeline.settings.index_dir / "chunks.jsonl").write_text("{not json", encoding="utf-8")
    fresh = _invoker(Pipeline(pipeline.settings, embedder=pipeline.embedder))
    assert_user_error(fresh("games"), "rules index --rebuild", code=ExitCode.SETUP)
    assert fresh("index", "--rebuild").exit_code == 0
    assert fresh("games").exit_code == 0


# --- doctor, config, models ------------------------------------------------------------------


def test_doctor_reports_checks_paths_models_and_versions(invoke: Invoke) -> None:
    invoke("index")
    result = invoke("doctor")
    assert result.exit_code == 0, result.output
    out = result.stdout
    checks = {line.split("\t")[1]: line.split("\t") for line in out.splitlines()[1:6]}
    assert set(checks) == {"config file", "rulebooks", "embedder", "answers", "index"}
    assert checks["rulebooks"][2].startswith("4 games")
    assert checks["index"][0] == "✔"
    assert checks["answers"][0] == "!"  # auto backend without an LLM: extractive, a warning
    for expected in ("all-minilm-l6-v2\tembedder", "qwen2.5-1.5b-instruct", "\tLLM\t",
                     "index dir", "sentence-transformers\t"):  # fmt: skip
        assert expected in out


def test_doctor_fails_with_setup_code_on_a_corrupt_index(
    invoke: Invoke, pipeline: Pipeline
) -> None:
    invoke("index")
    (pipeline.settings.index_dir / "vectors.faiss").write_bytes(b"junk")
    result = invoke("doctor")
    assert result.exit_code == ExitCode.SETUP
    assert "rules index --rebuild" in result.stdout


def test_config_shows_effective_settings_as_toml_with_their_sources(
    invoke_unpiped: Invoke, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home.mkdir()
    (home / "config.toml").write_text(
        '[retrieval]\nk = 7\nmode = "dense"\n[api]\napi_keys = ["s3cret"]\n', encoding="utf-8"
    )
    monkeypatch.setenv("RULEKEEPER_RETRIEVAL__K", "8")
    result = invoke_unpiped("config")
    assert result.exit_code == 0, result.output
    out = result.stdout
    settings = tomllib.loads(out)  # pasteable into the config file
    assert settings["retrieval"]["k"] == 8 and settings["retrieval"]["mode"] == "dense"
    assert settings["home"] == str(home)
    assert "k = 8  # from $RULEKEEPER_RETRIEVAL__K" in out
    assert 'mode = "dense"  # from the config file' in out
    assert "# Passages returned per question." in out
    assert "s3cret" not in out and "(1 set, hidden)" in out
    assert str(home / "config.toml") in out
    path = invoke_unpiped("config", "--path")
    assert path.stdout.strip() == str(home / "config.toml")


def test_invalid_settings_are_one_line_naming_the_variable(
    invoke_unpiped: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RULEKEEPER_RETRIEVAL__K", "many")
    assert_user_error(invoke_unpiped("config"), "retrieval.k", "RULEKEEPER_RETRIEVAL__K")


def test_a_malformed_config_file_is_one_line(invoke_unpiped: Invoke, home: Path) -> None:
    home.mkdir()
    (home / "config.toml").write_text("k = = 3\n", encoding="utf-8")
    assert_user_error(invoke_unpiped("config"), "not valid TOML", str(home / "config.toml"))


def test_models_list_and_fetch(invoke: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    listed = invoke("models", "list")
    assert listed.exit_code == 0 and "smollm2-135m\tllm" in listed.stdout
    fetched: list[str] = []

    def fake_fetch(spec: ModelSpec, models_dir: Path, progress: Callable[[str], None]) -> Path:
        progress(f"joining {spec.name}")
        fetched.append(spec.name)
        return models_dir / spec.name

    monkeypatch.setattr(models_command, "fetch", fake_fetch)
    result = invoke("models", "fetch")  # no names: the models the settings use
    assert result.exit_code == 0, result.output
    assert fetched == ["embeddinggemma-300m", "qwen2.5-1.5b-instruct"]
    assert "joining embeddinggemma-300m" in result.stderr
    assert "Gemma terms" in result.stderr  # the licence is stated before the download
    assert "embeddinggemma-300m: ready at" in result.stdout
    assert_user_error(invoke("models", "fetch", "gpt-5"), "Unknown model gpt-5")
    assert fetched == ["embeddinggemma-300m", "qwen2.5-1.5b-instruct"]  # nothing fetched


def test_models_fetch_defaults_is_what_setup_fetches(
    invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    fetched: list[str] = []

    def fake_fetch(spec: ModelSpec, models_dir: Path, progress: Callable[[str], None]) -> Path:
        fetched.append(spec.name)
        return models_dir / spec.name

    monkeypatch.setattr(models_command, "fetch", fake_fetch)
    result = invoke("models", "fetch", "--defaults")
    assert result.exit_code == 0, result.output
    assert fetched == list(DEFAULT_FETCH)  # the settings' models and the test fixtures
    fetched.clear()
    assert invoke("models", "fetch", "qwen2.5-0.5b-instruct", "--defaults").exit_code == 0
    assert fetched == ["qwen2.5-0.5b-instruct", *DEFAULT_FETCH]


# --- chat -------------------------------------------------------------------------------------


def test_chat_follow_up_keeps_the_game_and_commands_work(invoke: Invoke) -> None:
    session = "\n".join([
        "How does a stealth test work in Maximum Apocalypse?",
        "and if I'm starving?",
        "/games",
        "/game suros",
        "/game",
        "how do zones work?",
        "/game chess",
        "/nope",
        "/help",
        "/quit",
        "never read",
    ])  # fmt: skip
    result = invoke("chat", input=session + "\n")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.count("Sources (maximum-apocalypse)") == 2  # the follow-up stayed
    assert "deck52-final-bus\t" in out  # /games
    assert "Now answering about Suros (suros)" in out and "Current game: Suros." in out
    assert "Sources (suros)" in out
    assert "suros> " in out  # the prompt names the conversation's game
    assert "Unknown game 'chess'" in result.stderr and "Unknown command /nope" in result.stderr
    assert "/game NAME" in out  # /help
    assert "never read" not in out


def test_chat_asks_which_game_and_ends_on_eof(invoke: Invoke) -> None:
    result = invoke("chat", input="how do I move?\n")
    assert result.exit_code == 0
    assert "/game NAME" in result.stderr and "Known games" in result.stderr


def test_follow_ups_carry_the_history_of_the_same_game_only(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[str | None, list[str]]] = []
    real_ask_stream = pipeline.ask_stream

    def ask_stream(
        question: str, game: str | None = None, k: int | None = None, history: Sequence[Turn] = ()
    ) -> Iterator[StreamEvent]:
        asked.append((game, [turn.question for turn in history]))
        return real_ask_stream(question, game, k, history)

    monkeypatch.setattr(pipeline, "ask_stream", ask_stream)
    session = ChatSession(pipeline)
    questions = iter([
        "What is the hand limit in Maximum Apocalypse?",
        "and if I'm starving?",
        "In Suros, how much AP do I gain?",
        "and on my first turn?",
    ])  # fmt: skip

    def read_line(_prompt: str) -> str:
        return next(questions, None) or _raise(EOFError)

    run_chat(session, Ui(), read_line)
    assert asked == [
        ("maximum-apocalypse", []),
        ("maximum-apocalypse", ["What is the hand limit in Maximum Apocalypse?"]),
        ("suros", []),  # another game: the old topic does not steer the new one
        ("suros", ["In Suros, how much AP do I gain?"]),
    ]


def test_ctrl_c_stops_the_answer_not_the_session(
    scripted_pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = iter([KeyboardInterrupt, None])

    def stream(self: ScriptedGenerator, prompt: Prompt) -> Iterator[str]:
        self.prompts.append(prompt)
        if prompt.task == "select":
            yield '{"ids": [1]}'
            return
        yield '{"conclusion": "Partial '
        interrupt = next(calls)
        if interrupt:
            raise interrupt
        yield 'whole answer."}'

    monkeypatch.setattr(ScriptedGenerator, "stream", stream)
    session = ChatSession(scripted_pipeline, game="suros")
    lines = iter(["first question", "second question"])
    ui = _TerminalUi()
    run_chat(session, ui, lambda _prompt: next(lines, None) or _raise(EOFError))
    assert [t.question for t in session.history] == ["second question"]
    assert "whole answer" in ui.buffer.getvalue()


def _raise(exc: type[BaseException]) -> str:
    raise exc


def test_outline_indents_and_names_headings_without_text_of_their_own() -> None:
    def chunk(*section: str) -> Chunk:
        return Chunk(id="|".join(section), game="g", section=section, text="t", lang="en",
                     start=0, end=1)  # fmt: skip

    toc = table_of_contents([
        chunk("Book", "Intro"),
        chunk("Book", "Setup", "1. Board"),
        chunk("Book", "Setup", "1. Board"),  # a long section: one TOC entry
        chunk("Book", "Setup", "2. Cards"),
        chunk("Book", "Combat"),
        chunk("Book", "Setup", "3. Tokens"),
    ])  # fmt: skip
    assert outline(toc) == [
        (1, 0, "Intro"),
        (None, 0, "Setup"),
        (2, 1, "1. Board"),
        (3, 1, "2. Cards"),
        (4, 0, "Combat"),
        (None, 0, "Setup"),  # reading order returns under it
        (5, 1, "3. Tokens"),
    ]


def test_a_failing_system_call_is_one_line_but_a_bug_keeps_its_traceback(
    tmp_path: Path, pipeline: Pipeline, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    unwritable = Pipeline(Settings(home=blocker / "home"), embedder=FakeEmbedder())
    assert_user_error(_invoker(unwritable)("index"), "Not a directory", str(blocker))

    def broken() -> None:
        raise NotADirectoryError("a message, no errno: raised by code, not by the system")

    monkeypatch.setattr(pipeline, "games", broken)
    assert isinstance(invoke("games").exception, NotADirectoryError)


# --- render -------------------------------------------------------------------------


def test_rules_render_reports_the_sentences_and_refuses_an_unknown_language(
    invoke_scripted: Invoke, invoke: Invoke
) -> None:
    render = invoke_scripted
    result = render("render", "zh", "--game", "deck52")
    assert result.exit_code == 0, result.output
    assert " now, 0 already)" in result.output and "renderings" in result.output
    assert "(0 now, " in render("render", "zh", "-g", "deck52").output
    assert render("render", "fr").exit_code == ExitCode.USAGE
    assert_user_error(invoke("render", "zh"), "needs an LLM")
