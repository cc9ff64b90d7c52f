"""Renderings kept on disk: made once by any process, found by every other, made ahead by
`rules render`."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ScriptedGenerator

from rag.answering import rendering
from rag.answering.rendering import Renderer, RenderingStore, rendering_prompt
from rag.errors import InputError
from rag.pipeline import Pipeline
from rag.prompting import phrases
from rag.settings import BUILTIN_CORPUS, GenerationSettings
from rag.types import LANGS, Lang

HAND_LIMIT = "Your hand limit is ten cards."


def test_a_rendering_made_by_one_process_is_found_by_another(tmp_path: Path) -> None:
    first = ScriptedGenerator(conclusions=["手牌上限是十张。"])
    made = Renderer(first, RenderingStore(tmp_path, "m")).checked(HAND_LIMIT, "zh")
    assert (made.text, made.made) == ("手牌上限是十张。", 1)
    second = ScriptedGenerator()  # would reply "See the rule." if asked
    kept = Renderer(second, RenderingStore(tmp_path, "m")).checked(HAND_LIMIT, "zh")
    assert (kept.text, kept.made) == ("手牌上限是十张。", 0)
    assert len(first.prompts) == 1 and second.prompts == []


def test_a_store_reads_what_another_appended_after_it_looked(tmp_path: Path) -> None:
    reader, writer = RenderingStore(tmp_path, "m"), RenderingStore(tmp_path, "m")
    assert reader.get(HAND_LIMIT, "zh") is None
    writer.put(HAND_LIMIT, "zh", "手牌上限是十张。")
    writer.put("Draw a card.", "zh", "抽一张牌。")
    assert reader.get("Draw a card.", "zh") == "抽一张牌。"
    assert reader.get(HAND_LIMIT, "zh") == "手牌上限是十张。"
    assert reader.get(HAND_LIMIT, "en") is None


def test_another_model_does_not_use_the_renderings(tmp_path: Path) -> None:
    RenderingStore(tmp_path, "llama:small").put(HAND_LIMIT, "zh", "手牌上限是十张。")
    assert RenderingStore(tmp_path, "llama:big").get(HAND_LIMIT, "zh") is None


def test_the_sentence_is_a_message_of_its_own_after_a_worked_example() -> None:
    # Appended to the task, a short sentence is read as part of it and the task rendered.
    messages = rendering_prompt("These tokens are optional.", "zh").messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[-1]["content"] == "These tokens are optional."
    assert "optional" not in messages[1]["content"]
    assert '"translation"' in messages[2]["content"]  # the example's reply has the asked shape


@pytest.mark.parametrize("lang", LANGS)
def test_a_sentence_can_be_rendered_into_every_language(lang: Lang) -> None:
    # An English question on a Chinese rulebook once failed here: English had no prompt.
    messages = rendering_prompt("规则。", lang).messages
    language = phrases(lang)["lang_name"].split()[0]  # "English", "Simplified"
    assert messages[-1]["content"] == "规则。" and language in messages[1]["content"]


def test_each_language_s_renderings_keep_a_file_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RenderingStore(tmp_path, "m")
    store.put("规则。", "en", "The rule.")
    store.put(HAND_LIMIT, "zh", "手牌上限是十张。")
    assert store.path("en") != store.path("zh")
    assert RenderingStore(tmp_path, "m").get("规则。", "en") == "The rule."
    # A changed English prompt leaves the Chinese renderings (shipped ones too) where they are.
    before = store.path("zh")
    english = dict(rendering.phrases("en"), render_example="抽两张牌。")
    monkeypatch.setattr(
        rendering, "phrases", lambda lang: english if lang == "en" else phrases(lang)
    )
    changed = RenderingStore(tmp_path, "m")
    assert changed.path("zh") == before and changed.path("en") != store.path("en")
    assert changed.get(HAND_LIMIT, "zh") == "手牌上限是十张。"


def test_a_changed_example_starts_a_new_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = RenderingStore(tmp_path, "m").path("zh")
    said = dict(rendering.phrases("zh"), render_example="Draw two cards.")
    monkeypatch.setattr(rendering, "phrases", lambda lang: said if lang == "zh" else phrases(lang))
    assert RenderingStore(tmp_path, "m").path("zh") != before


def test_shipped_renderings_are_read_and_new_ones_go_to_the_home(tmp_path: Path) -> None:
    shipped = tmp_path / "corpus" / "renderings"
    RenderingStore(shipped, "m").put(HAND_LIMIT, "zh", "手牌上限是十张。")
    store = RenderingStore(tmp_path / "home", "m", shipped=shipped)
    assert store.get(HAND_LIMIT, "zh") == "手牌上限是十张。"
    home = store.path("zh")
    assert not home.exists()  # reading wrote nothing to the home
    store.put("Draw a card.", "zh", "抽一张牌。")
    assert home.parent == tmp_path / "home" and home.is_file()
    assert "抽一张牌" not in (shipped / home.name).read_text(encoding="utf-8")
    assert RenderingStore(tmp_path / "other", "m2", shipped=shipped).get(HAND_LIMIT, "zh") is None


def test_the_built_in_rulebooks_renderings_ship_for_the_current_prompt(tmp_path: Path) -> None:
    # A changed rendering prompt starts a new store: the shipped one must be made again
    # (`rules render zh`, copied to corpus/renderings/), or Chinese questions wait for it.
    shipped = BUILTIN_CORPUS / "renderings"
    model = f"llama:{GenerationSettings().model}"
    store = RenderingStore(tmp_path, model, shipped=shipped)
    assert (shipped / store.path("zh").name).is_file()


def test_a_damaged_line_costs_its_rendering_and_a_half_written_one_waits(tmp_path: Path) -> None:
    store = RenderingStore(tmp_path, "m")
    path = store.path("zh")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"lang": "zh", "te\n{"lang": "zh", "text": "Draw a card.", "rend')
    assert store.get("Draw a card.", "zh") is None
    with path.open("a") as file:
        file.write('ering": "抽一张牌。"}\n')
    assert store.get("Draw a card.", "zh") == "抽一张牌。"


def test_render_ahead_renders_each_sentence_once_and_answers_then_render_nothing(
    scripted_pipeline: Pipeline, scripted: ScriptedGenerator
) -> None:
    made, kept = scripted_pipeline.render_ahead("zh", "Deck52: Final Bus")
    sentences = {p.question for p in scripted.prompts}
    assert made == len(sentences) > 20 and kept == 0
    # The scripted model's reply ("See the rule.") is no Chinese: each sentence is asked for
    # once more, word for word, as an answer would, and kept so.
    tasks = [p.messages[1]["content"] for p in scripted.prompts]
    assert len(tasks) == 2 * made and sum("word for word" in t for t in tasks) == made
    assert {p.task for p in scripted.prompts} == {"render"}
    assert scripted_pipeline.render_ahead("zh", "Deck52: Final Bus") == (0, made)
    assert scripted_pipeline.render_ahead("en", "Deck52: Final Bus") == (0, 0)  # English book

    asked = len(scripted.prompts)
    question = "Draw LOOT cards to Inventory? 开始时背包里放几张战利品牌？"
    answer = scripted_pipeline.ask(question, "deck52")
    assert answer.quotes and answer.game == "deck52-final-bus"
    assert "render" not in {p.task for p in scripted.prompts[asked:]}


def test_render_ahead_needs_an_llm(pipeline: Pipeline) -> None:
    with pytest.raises(InputError, match="needs an LLM"):
        pipeline.render_ahead("zh")
