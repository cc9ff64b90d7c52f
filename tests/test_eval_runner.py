"""The eval harness end to end over the real corpus with conftest's fakes (milliseconds each):
gold loading, the runner and its files, `rules eval` through CliRunner, and --compare."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from conftest import FakeEmbedder, ScriptedGenerator, make_hits
from typer.testing import CliRunner, Result

from eval.command import register
from eval.compare import (
    CHART_FILE,
    MARKDOWN_FILE,
    Config,
    ConfigRun,
    SharedModels,
    apply_overrides,
    load_configs,
    render_markdown,
    run_compare,
)
from eval.metrics import ItemScore, build_report
from eval.runner import (
    ITEMS_FILE,
    REPORT_FILE,
    UNRESOLVED,
    ItemResult,
    invents_a_number,
    load_gold,
    render_table,
    run_eval,
    select_items,
    without_fixed_lines,
)
from rag.errors import InputError, ModelError
from rag.generation import Generator
from rag.pipeline import Pipeline
from rag.prompting import Prompt
from rag.settings import Settings

EN_Q = "How much AP does a player gain at the beginning of each turn?"
ZH_Q = "苏罗斯里每个玩家回合开始时获得多少 AP？"
LOOT_Q = "In DECK 52, how many LOOT cards do you draw to the hero's Inventory at setup?"
ONLINE_Q = "Where can I play this game online with friends?"
AP_EVIDENCE = "At the beginning of a player turn after their first, gain 3 AP."
AP_FACTS = [["3 AP", "3AP"], ["first", "第一"]]

GOLD: list[dict[str, Any]] = [
    {
        "id": "suros-ap-en", "game": "Suros", "question": EN_Q, "lang": "en",
        "answerable": True, "evidence": [AP_EVIDENCE],
        "answer": "3 AP, except on your first turn.", "key_facts": AP_FACTS,
        "type": "lookup", "note": "extra fields are kept",
    },
    {
        "id": "suros-ap-zh", "game": "苏罗斯", "question": ZH_Q, "lang": "zh",
        "answerable": True, "evidence": [AP_EVIDENCE],
        "answer": "3AP，第一回合除外。", "key_facts": AP_FACTS,
        "type": "lookup",
    },
    {  # game: null, the question names it
        "id": "deck52-loot", "game": None, "question": LOOT_Q, "lang": "en",
        "answerable": True, "evidence": ["Draw 2 LOOT cards to hero's Inventory."],
        "answer": "Two.", "key_facts": [["2", "two", "两"]], "type": "procedure",
    },
    {
        "id": "deck52-online", "game": "deck 52", "question": ONLINE_Q, "lang": "en",
        "answerable": False, "evidence": [], "answer": "The rulebook does not say.",
        "key_facts": [], "type": "unanswerable",
    },
    {  # not in the corpus: a failure item, not a crash
        "id": "catan-robber", "game": "Catan", "question": "Where does the robber start?",
        "lang": "en", "answerable": True, "evidence": ["desert"], "answer": "The desert.",
        "key_facts": [["desert"]], "type": "lookup",
    },
    {  # game: null and the question names none: a failure item
        "id": "which-game", "game": None, "question": "How many cards do I draw?",
        "lang": "en", "answerable": True, "evidence": ["draw"], "answer": "?",
        "key_facts": [["two"]], "type": "lookup",
    },
]  # fmt: skip

CONCLUSIONS = {
    EN_Q: "You gain 3 AP at the beginning of each player turn after your first.",
    ZH_Q: "除第一回合外，每个玩家回合开始时都获得 3AP。",
    LOOT_Q: "Draw 2 LOOT cards to the hero's Inventory.",
}


class AnswerBook(Generator):
    """Replies by question, so an item declined before generation shifts no other reply:
    the first candidate is selected (none for a question the book does not know), and the
    conclusion is the book's."""

    name = "answer-book"

    def stream(self, prompt: Prompt) -> Iterator[str]:
        if prompt.task == "select":
            yield '{"ids": [1]}' if prompt.question in CONCLUSIONS else '{"ids": []}'
        elif prompt.task == "render":
            yield prompt.question  # the sentence, unchanged
        else:
            yield json.dumps({"conclusion": CONCLUSIONS[prompt.question]}, ensure_ascii=False)


def write_gold(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), "utf-8")
    return path


@pytest.fixture
def gold_file(tmp_path: Path) -> Path:
    return write_gold(tmp_path / "gold.jsonl", GOLD)


@pytest.fixture
def book_pipeline(settings: Settings) -> Pipeline:
    # The hashed-word fake embedder scores Chinese questions below the relevance floor;
    # with no floor, the replies alone decide which items abstain: the selection's.
    settings.retrieval.min_dense_score = 0.0
    settings.generation.select = True
    return Pipeline(settings, embedder=FakeEmbedder(), generator=AnswerBook())


def by_id(out_dir: Path) -> dict[str, dict[str, Any]]:
    lines = (out_dir / ITEMS_FILE).read_text(encoding="utf-8").splitlines()
    return {json.loads(line)["gold"]["id"]: json.loads(line) for line in lines}


# --- the gold file ----------------------------------------------------------------------


def test_the_gold_file_loads_with_blank_lines_and_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "gold.jsonl"
    lines = [json.dumps(GOLD[0]), "", json.dumps(GOLD[3], ensure_ascii=False)]
    path.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")
    items = load_gold(path)
    assert [i.id for i in items] == ["suros-ap-en", "deck52-online"]
    assert items[0].key_facts == (("3 AP", "3AP"), ("first", "第一"))
    assert items[0].raw["note"] == "extra fields are kept"


def _broken(field: str, value: Any) -> dict[str, Any]:
    return {**GOLD[0], field: value}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps([1, 2]), "must be a JSON object"),
        (json.dumps({k: v for k, v in GOLD[0].items() if k != "evidence"}), "missing field"),
        (json.dumps(_broken("lang", "fr")), "'lang' must be one of en, zh"),
        (json.dumps(_broken("type", "trivia")), "'type' must be one of"),
        (json.dumps(_broken("answerable", "yes")), "'answerable' must be true or false"),
        (json.dumps(_broken("evidence", [])), "at least one evidence string"),
        (json.dumps(_broken("evidence", ["  "])), "'evidence' must be a list of non-empty"),
        (json.dumps(_broken("key_facts", [[]])), "each key fact needs"),
        (json.dumps(_broken("key_facts", ["3 AP"])), "'key_facts[]' must be a list"),
        (json.dumps(_broken("question", "")), "'question' must be a non-empty string"),
        (json.dumps(_broken("game", 7)), "'game' must be a non-empty string"),
        (json.dumps(GOLD[0]), "duplicate id 'suros-ap-en' (first on line 1)"),
    ],
)
def test_a_bad_line_is_named_by_its_number(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "gold.jsonl"
    path.write_text(json.dumps(GOLD[0]) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"gold\.jsonl:2: ") as caught:
        load_gold(path)
    assert message in str(caught.value)


def test_missing_and_empty_gold_files_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_gold(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="holds no items"):
        load_gold(tmp_path / "empty.jsonl")


def test_items_are_selected_by_game_name_then_limited(
    scripted_pipeline: Pipeline, gold_file: Path
) -> None:
    items = load_gold(gold_file)
    # "Final Bus" is an alias; the item with game null counts because its question names it.
    picked = select_items(scripted_pipeline, items, "Final Bus")
    assert [i.id for i in picked] == ["deck52-loot", "deck52-online"]
    assert [i.id for i in select_items(scripted_pipeline, items, limit=2)] == [
        "suros-ap-en",
        "suros-ap-zh",
    ]


# --- the runner -------------------------------------------------------------------------


def test_runner_scores_each_item_and_writes_them_one_by_one(
    book_pipeline: Pipeline, gold_file: Path, tmp_path: Path
) -> None:
    seen: list[tuple[str, int, int]] = []

    def progress(result: ItemResult, done: int, total: int) -> None:
        seen.append((result.item.id, done, total))

    out = tmp_path / "out"
    report = run_eval(book_pipeline, load_gold(gold_file), out_dir=out, progress=progress)
    assert seen == [(item["id"], n, 6) for n, item in enumerate(GOLD, start=1)]
    items = by_id(out)
    assert list(items) == [item["id"] for item in GOLD]
    assert items["suros-ap-en"]["gold"] == GOLD[0]  # the line as written, extras included

    en = items["suros-ap-en"]
    assert en["ask"]["game"] == "suros"
    assert len(en["ask"]["passages"]) == 5
    assert en["metrics"] | {"latency_s": None} == {
        "game": "suros",
        "first_hit_rank": 1,  # the AP passage shares most words with the question
        "hit@1": True,
        "hit@5": True,
        "reciprocal_rank": 1.0,
        "key_facts_covered": [True, True],
        "key_fact_recall": 1.0,
        "abstention_correct": True,
        "citations": 1,
        "citations_supported": 1,
        "answer_lang": "en",
        "language_match": True,
        "latency_s": None,
        "error": None,
        "conclusion_shown": True,
        "right_way_round": None,  # not a probe item
        "invented_number": False,
        "renderings_shown": 0,  # an English question on an English book
        "renderings_withheld": 0,
        "deciding_holds_evidence": True,  # the sentence shown first holds the evidence
        "conclusion_right": True,  # and the conclusion shown covers a key fact
        "deciding_line": None,  # the deciding sentence is in the asker's language
        "terms_rendered_otherwise": 0,
    }
    zh = items["suros-ap-zh"]["metrics"]
    # The fake embedder quotes an unrelated sentence for the Chinese question, so its
    # conclusion's "3" is in no quote: withheld, it covers no fact, and says so in Chinese.
    assert (zh["key_facts_covered"], zh["answer_lang"], zh["abstention_correct"]) == (
        [False, False],
        "zh",
        True,
    )
    assert zh["conclusion_shown"] is False
    # The book "renders" a sentence by echoing it in English: no rendering, so it is
    # withheld, counted, and said so in the rule text.
    assert (zh["renderings_shown"], zh["renderings_withheld"]) == (0, 1)
    assert "机器译文: 未通过核对，不显示" in items["suros-ap-zh"]["ask"]["answer"]
    assert (report["answer"]["renderings_shown"], report["answer"]["renderings_withheld"]) == (0, 1)
    assert items["deck52-loot"]["ask"]["game"] == "deck52-final-bus"  # detected
    declined = items["deck52-online"]
    assert declined["ask"]["abstained"] is True
    assert declined["metrics"]["abstention_correct"] is True
    assert declined["metrics"]["hit@1"] is None  # unanswerable: retrieval not measured

    for failed in ("catan-robber", "which-game"):
        assert items[failed]["ask"] is None
        assert items[failed]["metrics"]["game"] == UNRESOLVED
        assert items[failed]["metrics"]["error"].startswith("GameNotFoundError: ")

    assert json.loads((out / REPORT_FILE).read_text(encoding="utf-8")) == report
    assert (report["n"], report["errors"], report["k"]) == (6, 2, 5)
    answer = report["answer"]
    # Answerable: en and loot (all facts covered), zh (withheld) and the two failures: 2 / 5.
    assert answer["key_fact_recall"] == 0.4
    # Right: en, zh, loot answered and online declined; the two failures are wrong: 4 / 6.
    assert answer["abstention_accuracy"] == 0.6667
    assert answer["language_match"] == 0.6667
    assert report["by_game"][UNRESOLVED]["n"] == 2
    assert report["by_lang"]["zh"]["n"] == 1
    assert report["by_type"]["unanswerable"]["retrieval"]["mrr"] is None
    assert report["latency"]["p50_s"] is not None


def test_a_conclusion_in_another_language_than_the_question_is_no_language_match() -> None:
    from eval.runner import _score, parse_item
    from rag.answering.assembly import quoted_answer
    from rag.types import Quote

    item = parse_item(GOLD[1])  # asked in Chinese
    rule = "You gain 3 AP each turn."
    quote = Quote(1, "g:1", "g", "Game › Section 1", 3, rule, "每回合获得 3AP。")

    def scored(conclusion: str) -> bool:
        answer = quoted_answer(
            item.question, "g", "zh", quotes=[quote], conclusion=conclusion,
            checks=[], hits=make_hits(rule), backend="test",
        )  # fmt: skip
        return _score(item, answer, [], 0.0).lang_ok

    # Chinese headings and renderings around it do not make an English conclusion Chinese.
    assert not scored("You gain 3 AP at the beginning of each turn.")
    assert scored("每回合开始时获得 3AP（AP）。")


def test_the_extractive_pipeline_runs_end_to_end(pipeline: Pipeline, gold_file: Path) -> None:
    report = run_eval(pipeline, load_gold(gold_file))
    assert (report["n"], report["errors"], report["backend"]) == (6, 2, "extractive")
    assert report["settings"]["retrieval.mode"] == "hybrid"
    assert report["retrieval"]["hit@5"] is not None


def test_a_small_k_keeps_the_answer_and_still_measures_the_top_five(
    scripted_pipeline: Pipeline, gold_file: Path, tmp_path: Path
) -> None:
    items = load_gold(gold_file)[:1]
    report = run_eval(scripted_pipeline, items, k=3, out_dir=tmp_path)
    assert list(report["retrieval"]) == ["hit@1", "hit@3", "hit@5", "mrr"]
    assert len(by_id(tmp_path)["suros-ap-en"]["ask"]["passages"]) == 3  # the answer used k=3


def test_the_table_shows_every_group(scripted_pipeline: Pipeline, gold_file: Path) -> None:
    table = render_table(run_eval(scripted_pipeline, load_gold(gold_file)))
    assert table.startswith("6 items (2 failed), k = 5, answered by scripted")
    for label in ("all", "lang: zh", "game: suros", f"game: {UNRESOLVED}", "type: unanswerable"):
        assert f"\n{label} " in table


# --- `rules eval` -----------------------------------------------------------------------


def _app(generator: type[Generator] = ScriptedGenerator) -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """A callback keeps `eval` a subcommand, as in the real `rules` app."""

    register(
        app, make_pipeline=lambda s: Pipeline(s, embedder=FakeEmbedder(), generator=generator())
    )
    return app


def invoke(*args: str) -> Result:
    return CliRunner().invoke(_app(), ["eval", *args])


def test_json_prints_exactly_the_report(settings: Settings, gold_file: Path) -> None:
    result = invoke("--gold", str(gold_file), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # one object and nothing else
    assert {"n", "retrieval", "answer", "by_lang", "by_game", "latency"} <= set(report)
    assert set(report["retrieval"]) >= {"hit@1", "hit@5", "mrr"}
    assert set(report["answer"]) == {
        "key_fact_recall",
        "abstention_accuracy",
        "citation_precision",
        "language_match",
        "conclusion_shown",
        "right_way_round",
        "probe_conclusion_shown",
        "invented_numbers_shown",
        "renderings_shown",
        "renderings_withheld",
        "deciding_holds_evidence",
        "conclusion_right",
        "deciding_rendered",
        "deciding_word_by_word",
        "terms_rendered_otherwise",
    }
    assert set(report["by_lang"]) == {"en", "zh"}
    assert set(report["latency"]) == {"p50_s", "p95_s"}
    assert "[6/6] which-game: FAILED" in result.stderr
    assert "index: embed" in result.stderr  # the index was built, and said so


def test_options_limit_game_and_out(settings: Settings, gold_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = invoke("--gold", str(gold_file), "--game", "suros", "--limit", "1", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("1 items (0 failed), k = 5")
    assert list(by_id(out)) == ["suros-ap-en"]
    resumed = invoke("--gold", str(gold_file), "--game", "suros", "--out", str(out), "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert "suros-ap-en" not in resumed.stderr  # kept, not asked again
    assert set(by_id(out)) == {"suros-ap-en", "suros-ap-zh"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gold", "missing.jsonl"], "Gold file missing.jsonl not found."),
        (["--game", "Catan"], "Unknown game 'Catan'."),
        (["x.toml"], "x.toml: a configuration file is only read with --compare."),
        (["--compare", "missing.toml"], "Comparison file missing.toml not found."),
        (["--resume"], "--resume goes on from a single run's --out folder."),
    ],
)
def test_user_errors_are_one_line_and_exit_1(
    settings: Settings, gold_file: Path, args: list[str], message: str
) -> None:
    if "--gold" not in args:
        args = ["--gold", str(gold_file), *args]
    result = invoke(*args)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"Error: {message}")
    assert result.stderr.count("\n") == 1


def test_a_bad_setting_is_a_user_error(
    settings: Settings, gold_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RULEKEEPER_RETRIEVAL__MODE", "bm52")
    result = invoke("--gold", str(gold_file))
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: Invalid setting retrieval.mode = 'bm52'")


def test_a_bad_gold_line_names_its_number(settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(GOLD[0]) + "\n{oops\n", encoding="utf-8")
    result = invoke("--gold", str(path))
    assert result.exit_code == 1
    assert f"{path}:2: not valid JSON" in result.stderr


# --- --compare --------------------------------------------------------------------------

CONFIGS = """
[bm25]
description = "Keywords only."
retrieval = { mode = "bm25" }

[hybrid-k3]
retrieval = { mode = "hybrid", k = 3 }

[llama]
description = "Its model is not fetched in the tests."
generation = { backend = "llama" }

[buggy]
description = "A component of its own crashes."
generation = { model = "crashing" }
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "compare.toml"
    path.write_text(CONFIGS, encoding="utf-8")
    return path


def test_overrides_apply_on_top_of_the_base_settings(settings: Settings) -> None:
    changed = apply_overrides(settings, {"retrieval": {"mode": "bm25", "rerank": True}})
    assert (changed.retrieval.mode, changed.retrieval.rerank) == ("bm25", True)
    assert changed.retrieval.k == settings.retrieval.k
    assert changed.home == settings.home
    assert settings.retrieval.mode == "hybrid"  # the base is left alone


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[a]\nretrieval = { mode = "bm52" }', "[a]: retrieval.mode: Input should be"),
        ("[a]\nretrieval = { depth = 3 }", "[a]: retrieval has no setting depth"),
        (
            '[a]\ngeneration = { base_url = "http://gpu/v1" }',
            "[a]: setting generation.base_url has moved to openai.chat_url.",
        ),
        ("[a]\nranking = { k = 3 }", "[a]: 'ranking' is not a settings group"),
        ('[a]\nretrieval = "bm25"', "[a]: retrieval must be a table"),
        ("[a]\nretrieval = { k = 0 }", "[a]: retrieval.k: Input should be greater"),
        ('["a b"]\nretrieval = { k = 3 }', "[a b]: use letters, digits"),
        ("", "names no configuration"),
        ("[a", "Cannot read comparison file"),
    ],
)
def test_bad_configurations_are_refused_before_anything_runs(
    settings: Settings, tmp_path: Path, table: str, message: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(table, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_configs(path, settings)
    assert message in str(caught.value)


def test_the_shipped_configurations_are_valid(settings: Settings) -> None:
    from eval import DEFAULT_CONFIGS

    configs = load_configs(DEFAULT_CONFIGS, settings)
    assert {c.settings.retrieval.mode for c in configs} == {"bm25", "dense", "hybrid"}


class Crashing(Generator):
    name = "crashing"

    def stream(self, prompt: Prompt) -> Iterator[str]:
        raise ValueError("logprobs is not supported")


def _fake_factory(settings: Settings) -> Pipeline:
    if settings.generation.backend == "llama":
        raise ModelError("GGUF model not found: run `rules models fetch`.")
    generator = Crashing() if settings.generation.model == "crashing" else ScriptedGenerator()
    return Pipeline(settings, embedder=FakeEmbedder(), generator=generator)


def test_compare_writes_each_run_a_markdown_table_and_a_chart(
    settings: Settings, gold_file: Path, config_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cmp"
    runs = run_compare(
        load_configs(config_file, settings),
        load_gold(gold_file),
        out,
        base=settings,
        make_pipeline=_fake_factory,
    )
    assert [r.config.name for r in runs] == ["bm25", "hybrid-k3", "llama", "buggy"]
    assert runs[0].report is not None and runs[0].report["settings"]["retrieval.mode"] == "bm25"
    assert runs[1].report is not None and runs[1].report["k"] == 3  # the configuration's k
    assert runs[2].error == "GGUF model not found: run `rules models fetch`."
    assert runs[3].error == "ValueError: logprobs is not supported"  # the others still ran
    for name in ("bm25", "hybrid-k3"):
        assert len(by_id(out / name)) == 6
    markdown = (out / MARKDOWN_FILE).read_text(encoding="utf-8")
    assert "| config | n | failed | hit@1 |" in markdown
    assert "| bm25 | 6 | 2 |" in markdown
    assert "- **llama**: GGUF model not found" in markdown
    assert "`retrieval.mode=hybrid, retrieval.k=3`" in markdown
    assert f"![metrics per configuration]({CHART_FILE})" in markdown
    assert (out / CHART_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _report(*scores: ItemScore) -> dict[str, Any]:
    return build_report(scores)


def test_markdown_bolds_the_best_value_and_the_lowest_latency(settings: Settings) -> None:
    fast_miss = ItemScore("en", "g", "lookup", True, first_hit=None, latency_s=1.0)
    slow_hit = ItemScore("en", "g", "lookup", True, first_hit=1, latency_s=9.0)
    config = Config("x", "", {}, settings)
    runs = [
        ConfigRun(Config("fast", "", {}, settings), report=_report(fast_miss)),
        ConfigRun(Config("slow", "", {}, settings), report=_report(slow_hit)),
        ConfigRun(config, error="broken"),
    ]
    rows = {line.split(" | ")[0]: line for line in render_markdown(runs, 1).splitlines()}
    # hit@1 is 0 for fast and 1 for slow; p50 is 1 s for fast and 9 s for slow.
    assert "| 0.000 |" in rows["| fast"] and "| **1.000** |" in rows["| slow"]
    assert "| **1.000** | **1.000** |" in rows["| fast"]  # the two latency columns
    assert "| 9.000 | 9.000 |" in rows["| slow"]
    assert "| x" not in rows  # a configuration that could not run has no row


def test_configurations_on_another_embedder_run_first(
    settings: Settings, gold_file: Path, tmp_path: Path
) -> None:
    (tmp_path / "c.toml").write_text(
        '[base-a]\nretrieval = { mode = "bm25" }\n'
        '[other]\nembedding = { model = "all-minilm-l6-v2" }\n'
        '[base-b]\nretrieval = { mode = "dense" }\n',
        encoding="utf-8",
    )
    order: list[str] = []

    def recording(s: Settings) -> Pipeline:
        order.append(f"{s.embedding.model}/{s.retrieval.mode}")
        return _fake_factory(s)

    configs = load_configs(tmp_path / "c.toml", settings)
    runs = run_compare(
        configs, load_gold(gold_file)[:1], tmp_path / "o", base=settings, make_pipeline=recording
    )
    base = settings.embedding.model
    assert order == ["all-minilm-l6-v2/hybrid", f"{base}/bm25", f"{base}/dense"]
    assert [r.config.name for r in runs] == ["base-a", "other", "base-b"]  # file order


def test_shared_models_build_each_model_once(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []

    def embedder(settings: Settings) -> FakeEmbedder:
        made.append(f"{settings.embedding.model}@{settings.embedding.precision}")
        return FakeEmbedder()

    monkeypatch.setattr("eval.compare.embedder_for", embedder)
    monkeypatch.setattr("eval.compare.make_generator", lambda s: ScriptedGenerator())
    shared = SharedModels()
    bm25 = shared(apply_overrides(settings, {"retrieval": {"mode": "bm25"}}))
    dense = shared(apply_overrides(settings, {"retrieval": {"mode": "dense"}}))
    other = shared(apply_overrides(settings, {"embedding": {"model": "all-minilm-l6-v2"}}))
    int8 = shared(apply_overrides(settings, {"embedding": {"precision": "int8"}}))
    assert bm25.embedder is dense.embedder is not other.embedder
    assert int8.embedder not in (bm25.embedder, other.embedder)
    assert bm25.generator is dense.generator is other.generator  # same generation settings
    fewer = shared(apply_overrides(settings, {"generation": {"passages": 2}}))
    assert fewer.generator is bm25.generator  # a prompt setting: the model is the same
    base = settings.embedding.model
    assert made == [f"{base}@bfloat16", "all-minilm-l6-v2@bfloat16", f"{base}@int8"]


def test_compare_from_the_command_line(
    settings: Settings, gold_file: Path, config_file: Path, tmp_path: Path
) -> None:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """Keeps `eval` a subcommand."""

    register(app, make_pipeline=_fake_factory)
    out = tmp_path / "cmp"
    args = ["eval", "--compare", str(config_file), "--gold", str(gold_file), "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert list(payload["configs"]) == ["bm25", "hybrid-k3", "llama", "buggy"]
    assert payload["configs"]["bm25"]["n"] == 6
    assert payload["configs"]["llama"] == {
        "error": "GGUF model not found: run `rules models fetch`."
    }
    assert payload["markdown"] == str(out / MARKDOWN_FILE)
    assert "bm25 [6/6] which-game: FAILED" in result.stderr
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "llama could not run: GGUF model not found" in text.stdout
    assert f"Chart: {out / CHART_FILE}" in text.stdout


PROBE_GOLD = [
    {  # the rulebook gives 3 AP: a right-way-round "no" is expected
        "id": "probe-ap", "game": "Suros", "question": EN_Q, "lang": "en", "answerable": True,
        "evidence": [AP_EVIDENCE], "answer": "No: 3 AP.", "key_facts": AP_FACTS,
        "type": "condition", "polarity": "no",
    },
    {
        "id": "probe-loot", "game": "DECK 52", "question": LOOT_Q, "lang": "en",
        "answerable": True, "evidence": ["Draw 2 LOOT cards to hero's Inventory."],
        "answer": "Draw 2 LOOT cards.", "key_facts": [["2"]], "type": "procedure",
        "right_way": ["loot cards"], "wrong_way": ["discard"],
    },
]  # fmt: skip


def test_probe_items_count_conclusions_the_right_way_round(
    book_pipeline: Pipeline, tmp_path: Path
) -> None:
    report = run_eval(book_pipeline, load_gold(write_gold(tmp_path / "p.jsonl", PROBE_GOLD)))
    # "You gain 3 AP …" does not open with "no"; "Draw 2 LOOT cards …" holds "loot cards".
    assert report["answer"]["right_way_round"] == 0.5
    assert report["answer"]["probe_conclusion_shown"] == 1.0
    assert report["answer"]["invented_numbers_shown"] == 0


def test_probe_fields_are_checked_when_the_gold_is_read(tmp_path: Path) -> None:
    bad = [{**PROBE_GOLD[0], "polarity": "maybe"}]
    with pytest.raises(InputError, match="polarity"):
        load_gold(write_gold(tmp_path / "bad.jsonl", bad))


def test_an_interrupted_run_resumes_where_it_stopped(
    book_pipeline: Pipeline, gold_file: Path, tmp_path: Path
) -> None:
    items = load_gold(gold_file)
    whole = run_eval(book_pipeline, items, out_dir=tmp_path / "whole")
    out = tmp_path / "resumed"
    run_eval(book_pipeline, items[:2], out_dir=out)  # stopped after two items
    with (out / ITEMS_FILE).open("a", encoding="utf-8") as torn:
        torn.write('{"gold": {"id": ')  # the line being written when it stopped
    asked: list[str] = []
    resumed = run_eval(
        book_pipeline,
        items,
        out_dir=out,
        resume=True,
        progress=lambda result, done, total: asked.append(result.item.id),
    )
    assert asked == [item.id for item in items[2:]]  # the first two were not asked again
    assert sorted(by_id(out)) == sorted(item.id for item in items)
    for key in ("retrieval", "answer"):
        assert _without_latency(resumed[key]) == _without_latency(whole[key])


def _without_latency(section: Any) -> Any:
    if isinstance(section, dict):
        return {k: _without_latency(v) for k, v in section.items() if "latency" not in k}
    return section


def test_a_shown_conclusion_invents_a_number_it_states_or_counts_unlike_its_quotes() -> None:
    from rag.types import Quote

    def quotes(*texts: str) -> list[Quote]:
        return [Quote(i, f"g:{i}", "g", "Game › Rules", 1, t, None) for i, t in enumerate(texts)]

    assert invents_a_number("Gain 5 AP.", quotes("Gain 3 AP each round."))
    assert invents_a_number("Roll one die.", quotes("Roll the two Spawn dice."))
    assert not invents_a_number("Draw one card.", quotes("Draw a card.", "Hold ten cards."))
    in_deck_52 = "In Deck 52, draw a card."
    assert invents_a_number(in_deck_52, quotes("Draw a card."))
    assert not invents_a_number(in_deck_52, quotes("Draw a card."), ("Deck 52",))


def test_key_facts_are_not_found_in_the_lines_every_answer_carries() -> None:
    from rag.prompting import phrases

    says_no = f"{phrases('en')['not_covered']}\n\n{phrases('en')['reminder']}"
    assert "not" in says_no  # a key fact such as ["no", "not"] would be found in it...
    assert without_fixed_lines(says_no).strip() == ""  # ...but is not scored there
    shown = f"{phrases('zh')['read_the_rule']}\n\n规则原文:\n    “You cannot move.”"
    assert "You cannot move." in without_fixed_lines(shown)
    withheld = f"{shown}\n      机器译文: {phrases('zh')['rendering_withheld']}"
    assert "不" in withheld and "不" not in without_fixed_lines(withheld)  # 不显示 is no "not"
