"""The embeddable widget end to end in headless Chromium (Debian's /usr/bin/chromium)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from conftest import CHROMIUM

from rag.pipeline import Pipeline

if TYPE_CHECKING:
    from conftest import ScriptedGenerator, SlowGenerator

QUESTION = "How much HP does each player start with?"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install chromium)",
    ),
]


def asked_bodies(page: Any) -> list[dict[str, Any]]:
    """The JSON body of every question the page sends, in order, as it sends them."""
    bodies: list[dict[str, Any]] = []
    page.on(
        "request",
        lambda r: bodies.append(json.loads(r.post_data)) if r.url.endswith("/ask/stream") else None,
    )
    return bodies


def open_demo(page: Any, url: str) -> None:
    page.goto(f"{url}/demo")
    page.wait_for_selector(".rk-game option[value=suros]", state="attached")


def ask(page: Any, question: str, game: str = "suros") -> None:
    page.select_option(".rk-game", game)
    page.fill(".rk-input", question)
    page.click(".rk-ask")


def test_streams_the_answer_and_opens_cited_sections(
    page: Any, serve_api: Any, pipeline: Pipeline
) -> None:
    url = serve_api(pipeline)
    expected = httpx.post(f"{url}/v1/ask", json={"question": QUESTION, "game": "suros"}).json()

    open_demo(page, url)
    ask(page, QUESTION)
    page.wait_for_selector(".rk-cite")
    assert page.inner_text(".rk-question") == QUESTION
    answer = page.inner_text(".rk-answer")
    assert " ".join(answer.split()) == " ".join(expected["answer"].split())
    labels = page.locator(".rk-cite").all_inner_texts()
    assert labels == [f"[{c['n']}] {c['section']}" for c in expected["citations"]]
    assert page.locator(".rk-rule").is_hidden() and page.locator(".rk-draft").is_hidden()

    # A marker in the answer text opens its section, its deciding sentence marked.
    marker = page.locator(".rk-answer .rk-marker").first
    n = int(marker.inner_text().strip("[]"))
    quote = next(q for q in expected["quotes"] if q["n"] == n and q["deciding"])
    marker.click()
    mark = page.frame_locator(".rk-frame").locator("mark#rk-quote")
    assert mark.inner_text() == quote["text"]
    assert (
        quote["section"].split(" › ")[-1]
        in page.frame_locator(".rk-frame").locator("h1").inner_text()
    )
    assert page.locator(".rk-chat").is_hidden()
    page.click(".rk-back")
    assert page.locator(".rk-viewer").is_hidden() and page.locator(".rk-cite").count() == len(
        labels
    )


def test_rule_text_then_a_dimmed_draft_then_the_checked_answer(
    page: Any, serve_api: Any, slow_pipeline: Pipeline, slow: SlowGenerator
) -> None:
    slow.pieces, slow.delay = 12, 0.25
    url = serve_api(slow_pipeline)
    open_demo(page, url)
    # Not a how-many question: the draft, restating the deciding rule, then passes the checks.
    ask(page, "What HP does each player start with?")
    # The rule text shows before the model has written a word; its markers open the passage.
    page.wait_for_selector(".rk-rule .rk-marker")
    assert page.inner_text(".rk-rule").startswith("Deciding rule:")
    # The deciding sentence is set apart and highlighted, first thing the eye finds.
    deciding = page.locator(".rk-rule mark.rk-deciding")
    assert deciding.count() == 1 and deciding.is_visible()
    assert deciding.inner_text().startswith("“") and deciding.inner_text().endswith("”")
    assert page.inner_text(".rk-answer") == "" and not page.locator(".rk-cite").count()
    page.locator(".rk-rule .rk-marker").first.click()
    page.wait_for_selector(".rk-frame:not([hidden])")
    page.click(".rk-back")
    # The draft streams in, set apart until it is checked.
    assert slow.started.wait(10)
    page.wait_for_function(
        "(n) => document.querySelector('.rk-draft-text').textContent.trim().split(/\\s+/)"
        ".length > n && !document.querySelector('.rk-cite')",
        arg=len(slow.rule.split()) + 1,
    )
    assert page.locator(".rk-draft").is_visible()
    assert "checking" in page.inner_text(".rk-draft")
    style = page.eval_on_selector(".rk-draft", "n => getComputedStyle(n).fontStyle")
    assert style == "italic"
    assert page.inner_text(".rk-answer") == ""
    # The checked answer replaces both; the passage a reader opened stays open.
    page.wait_for_selector(".rk-cite")
    answer = page.inner_text(".rk-answer")
    assert answer.startswith("Deciding rule:") and "\nConclusion: " in answer
    assert page.locator(".rk-answer mark.rk-deciding").count() == 1
    conclusion = answer.split("Conclusion: ", 1)[1].split("[1]")[0]
    assert len(conclusion.split()) == len(slow.rule.split()) + slow.pieces
    assert page.locator(".rk-rule").is_hidden() and page.locator(".rk-draft").is_hidden()
    assert page.inner_text(".rk-draft-text") == ""
    page.click(".rk-tab-book")  # the section the reader opened is still there
    assert page.locator(".rk-frame").is_visible()


def test_a_withheld_draft_leaves_only_the_rule_text(
    page: Any, serve_api: Any, scripted_pipeline: Pipeline, scripted: ScriptedGenerator
) -> None:
    scripted.conclusions = [
        '{"conclusion": "Each player starts with 99 HP."}'
    ] * 2  # and again when asked again
    open_demo(page, serve_api(scripted_pipeline))
    ask(page, QUESTION)
    page.wait_for_selector(".rk-cite")
    answer = page.inner_text(".rk-answer")
    assert "99" not in page.inner_text(".rk")
    assert answer.startswith("Deciding rule:") and "Conclusion" not in answer


def test_model_and_user_text_is_never_html(
    page: Any, serve_api: Any, scripted_pipeline: Pipeline, scripted: ScriptedGenerator
) -> None:
    payload = '<img src=x onerror="window.__rkXss=true"><b>bold</b>'
    scripted.conclusions = [json.dumps({"conclusion": "{rule} " + payload})]
    open_demo(page, serve_api(scripted_pipeline))
    # The payload asked too: a conclusion uses only the words of its quotes and question.
    question = f"<script>window.__rkXss=2</script> {payload} {QUESTION}"
    ask(page, question)
    page.wait_for_selector(".rk-cite")
    assert payload in page.inner_text(".rk-answer")  # it was the draft too, then the answer
    assert page.inner_text(".rk-question") == question
    assert page.locator(".rk img, .rk b, .rk script").count() == 0
    assert page.evaluate("window.__rkXss") is None


def test_follow_ups_keep_the_conversation_and_errors_show(
    page: Any, serve_api: Any, pipeline: Pipeline
) -> None:
    bodies = asked_bodies(page)
    open_demo(page, serve_api(pipeline))
    ask(page, "How do I win?", game="")  # no game named: the server lists the games
    page.wait_for_selector(".rk-status.rk-error")
    assert "Known games" in page.inner_text(".rk-status")

    ask(page, QUESTION)
    page.wait_for_selector(".rk-cite")
    ask(page, "What does each player gain next?")
    page.wait_for_function(
        "() => document.querySelector('.rk-question').textContent.startsWith('What does')"
    )
    page.wait_for_selector(".rk-cite")
    assert "conversation_id" not in bodies[1]
    assert bodies[2]["conversation_id"].startswith("c_")
    page.click(".rk-new")
    ask(page, "What now?", game="")
    page.wait_for_selector(".rk-status.rk-error")
    assert "conversation_id" not in bodies[3]


def test_the_demo_works_with_keys_on(page: Any, serve_api: Any, pipeline: Pipeline) -> None:
    """With only a secret key configured, the demo uses its own publishable key."""
    open_demo(page, serve_api(pipeline, api_keys=["sk_server"]))  # lists the games: a GET
    ask(page, QUESTION)  # a POST, with its Origin
    page.wait_for_selector(".rk-cite")
    assert page.inner_text(".rk-answer").startswith("Deciding rule:")


def test_the_game_that_answered_shows_with_the_citations(
    page: Any, serve_api: Any, slow_pipeline: Pipeline, slow: SlowGenerator
) -> None:
    slow.pieces, slow.delay = 6, 0.1
    open_demo(page, serve_api(slow_pipeline))
    # Every change to the widget is checked: an answer shown without its citations is noted.
    page.evaluate(
        """() => {
          window.__rkAnswerWithoutCitations = 0;
          new MutationObserver(() => {
            const answer = document.querySelector('.rk-answer').textContent;
            if (answer && !document.querySelector('.rk-cite')) window.__rkAnswerWithoutCitations++;
          }).observe(document.querySelector('.rk'), {childList: true, subtree: true});
        }"""
    )
    ask(page, "How much HP does each player start with?", game="")  # placed by the question?
    page.wait_for_selector(".rk-status.rk-error")  # no: the server asks which game
    assert page.locator(".rk-answered").is_hidden()
    ask(page, "How much HP does each player start with in Suros?", game="")
    page.wait_for_selector(".rk-rule .rk-marker")
    assert page.inner_text(".rk-answered") == "Game: Suros"  # already with the rule text
    page.wait_for_selector(".rk-cite")
    assert page.inner_text(".rk-answered") == "Game: Suros"
    assert page.evaluate("window.__rkAnswerWithoutCitations") == 0


def answered(page: Any, question: str, game: str) -> None:
    """Ask `question` and wait for its answer's citations."""
    ask(page, question, game)
    page.wait_for_function(
        "q => document.querySelector('.rk-question').textContent === q"
        " && document.querySelector('.rk-cite')",
        arg=question,
    )


def test_a_new_game_or_topic_starts_a_new_conversation(
    page: Any, serve_api: Any, pipeline: Pipeline
) -> None:
    bodies = asked_bodies(page)
    open_demo(page, serve_api(pipeline))
    answered(page, QUESTION, "suros")
    answered(page, "And what if it runs out?", "suros")  # the server reads a follow-up
    assert "conversation_id" not in bodies[0] and bodies[1]["conversation_id"].startswith("c_")
    assert page.locator(".rk-follow-up").is_visible()
    # The widget sends the conversation and does not guess: the server reads a new topic.
    answered(page, "How many cards are in the deck?", "suros")
    assert bodies[2]["conversation_id"] == bodies[1]["conversation_id"]
    assert page.locator(".rk-follow-up").is_hidden()
    answered(page, "And how does hunger work in Maximum Apocalypse?", "")  # "Any game" chosen
    assert "conversation_id" not in bodies[3] and "game" not in bodies[3]
    assert page.inner_text(".rk-answered") == "Game: Maximum Apocalypse"
    answered(page, "And how much HP does each player start with?", "suros")  # "Any game" -> Suros
    assert "conversation_id" not in bodies[4] and bodies[4]["game"] == "suros"
    page.click(".rk-new")  # also forgets the game chosen
    assert page.eval_on_selector(".rk-game", "s => s.value") == ""
    assert page.locator(".rk-answered").is_hidden()


def test_a_second_unrelated_chinese_question_is_answered_fresh(
    page: Any, serve_api: Any, pipeline: Pipeline
) -> None:
    bodies = asked_bodies(page)
    url = serve_api(pipeline)
    open_demo(page, url)
    game = "maximum-apocalypse"
    answered(page, "怪物生成在玩家格，是立刻激活吗？", game)
    answered(page, "手牌上限是多少？", game)  # no space in it, and no word referring back
    assert bodies[1]["conversation_id"].startswith("c_")  # sent with its conversation
    assert page.locator(".rk-follow-up").is_hidden()
    fresh = httpx.post(f"{url}/v1/ask", json={"question": "手牌上限是多少？", "game": game}).json()
    cited = page.locator(".rk-citations .rk-cite").all_inner_texts()
    assert cited == [f"[{c['n']}] {c['section']}" for c in fresh["citations"]]
    answered(page, "那如果手牌超过上限呢？", game)  # refers back
    assert bodies[2]["conversation_id"] == bodies[1]["conversation_id"]
    assert page.locator(".rk-follow-up").is_visible()


def test_labels_in_the_visitors_language(page: Any, serve_api: Any, pipeline: Pipeline) -> None:
    url = serve_api(pipeline)

    def in_chinese(route: Any) -> None:  # an owner's page asking for Chinese labels
        html = route.fetch().text()
        route.fulfill(
            body=html.replace("<div data-rulekeeper>", '<div data-rulekeeper data-lang="zh">')
        )

    page.route(f"{url}/demo", in_chinese)
    open_demo(page, url)
    assert page.inner_text(".rk-ask") == "提问" and page.inner_text(".rk-new") == "新对话"
    assert page.get_attribute(".rk-input", "placeholder") == "问一个规则问题…"
    assert page.inner_text(".rk-game option[value='']").startswith("任意游戏")
    ask(page, "Suros 每个玩家开始时有多少生命值？")
    page.wait_for_selector(".rk-cite")
    assert page.inner_text(".rk-answered") == "游戏：Suros"
    assert page.locator(".rk-tab").all_inner_texts() == ["对话", "规则书"]
    page.locator(".rk-cite").first.click()
    page.wait_for_selector(".rk-frame:not([hidden])")
    assert page.inner_text(".rk-back") == "← 返回对话"
    assert page.inner_text(".rk-to-contents") == "目录"


def test_rule_text_drawn_from_the_quotes_keeps_the_word_by_word_line(
    page: Any, serve_api: Any, pipeline: Pipeline
) -> None:
    # A server that sends the quotes but no rendered text (the widget draws it itself).
    quote = {
        "n": 1, "chunk_id": "g:1", "game": "suros", "section": "Suros › 势力", "page": None,
        "text": "杀死相同势力的角色须弃置所有手牌。", "translation": None,
        "translation_withheld": True, "deciding": True,
        "word_by_word": "… faction … must … all hand cards",
    }  # fmt: skip
    event = f"event: quotes\ndata: {json.dumps({'quotes': [quote]}, ensure_ascii=False)}\n\n"
    open_demo(page, serve_api(pipeline))
    page.route(
        "**/ask/stream",
        lambda route: route.fulfill(
            status=200, content_type="text/event-stream", body=event.encode("utf-8")
        ),
    )
    ask(page, "What happens when a faction kills its own?")
    page.wait_for_selector(".rk-rule:not([hidden])")
    rule = page.inner_text(".rk-rule")
    assert "(machine translation withheld)" in rule
    assert "Word by word from the book's glossary (not a translation): … faction … must" in rule
