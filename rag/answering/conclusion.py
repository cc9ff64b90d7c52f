"""Conclusion: one or two sentences that answer the question as asked, from the quotes alone.

The LLM sees only the quoted sentences chosen for it (with their renderings, for a question
in another language), not the other candidates, so it has little to misread. A yes/no
question is told to begin with yes or no; a negated when/where question is asked both ways
round (see rewording). The reply is JSON held to a schema; its "conclusion" string streams
out as it is written.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from rag.answering.rewording import asks_yes_or_no, both_sides, yes_no_word
from rag.answering.selection import context_line
from rag.lang import sentence_spans
from rag.prompting import Prompt, fill, phrases, render, reply_text, system_message
from rag.types import Lang, Quote

CONCLUSION_FIELD = "conclusion"
_FIELD_START = re.compile(rf'"{CONCLUSION_FIELD}"\s*:\s*"')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


ANSWER_FIELD = "answer"  # a yes/no question's yes or no, chosen before the conclusion


def conclusion_schema(yes_no: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    if yes_no:
        properties[ANSWER_FIELD] = {"type": "string", "enum": ["yes", "no"]}
    properties[CONCLUSION_FIELD] = {"type": "string"}
    return {"type": "object", "properties": properties, "required": list(properties)}


def conclusion_prompt(
    question: str,
    lang: Lang,
    quotes: Sequence[Quote],
    *,
    game_title: str,
    earlier_question: str | None = None,
    closest_rule: str | None = None,
) -> Prompt:
    """The conclusion's prompt over `quotes` (in the order shown, i.e. reading order);
    `closest_rule` is the sentence closest to the question, which decides whether a
    negated when-question is asked both ways round (see rewording)."""
    words = phrases(lang)
    yes_no = asks_yes_or_no(question, lang)
    reply = words["reply_yes_no" if yes_no else "reply_plain"]
    task = fill(words["conclude"], "conclude", reply=fill(reply, "reply"))
    rule_text = "\n".join(
        f"{i}. ({q.label}) {q.text}" + (f"\n   ({q.rendering})" if q.rendering else "")
        for i, q in enumerate(quotes, start=1)
    )
    user = render(
        "conclude.txt",
        game_title=game_title,
        rule_text=rule_text,
        context=context_line(lang, earlier_question),
        question=both_sides(question, lang, closest_rule).strip(),
        task=task,
    )
    return Prompt(
        task="conclude",
        question=question,
        messages=[system_message(), {"role": "user", "content": user}],
        schema=conclusion_schema(yes_no),
    )


def parse_conclusion(reply: str, question: str, lang: Lang) -> str:
    """The reply's conclusion, opened by the yes or no chosen for a yes/no question (in
    the question's own verb: 可以 / 不可以). A reply that is not JSON (a backend that cannot
    hold the schema) is the conclusion itself."""
    text, data = reply_text(reply, CONCLUSION_FIELD)
    text = _without_questions(text)
    answer = data.get(ANSWER_FIELD)
    if text and answer in ("yes", "no"):
        return f"{yes_no_word(answer, question, lang)} {text}"
    return text


_ASKS = re.compile(r"[?？][\s\"'”’」』）)]*$")


def _without_questions(text: str) -> str:
    """The conclusion without sentences that ask: a conclusion states, and a question in it
    is the asker's question echoed (对于…怪物攻击谁由谁决定？根据规则，…)."""
    for start, end in reversed(sentence_spans(text)):
        if _ASKS.search(text[start:end]):
            text = text[:start] + text[end:].lstrip()
    return text.strip()


def stream_conclusion(pieces: Iterator[str], reply: list[str]) -> Iterator[str]:
    """The conclusion's text as the JSON reply streams in (escapes decoded); every piece
    is also appended to `reply`. A reply that is not JSON streams through as it is."""
    seen = ""
    plain: bool | None = None  # decided on the reply's first visible character
    start: int | None = None  # where the conclusion string's content begins in `seen`
    done = 0  # characters of that content already passed on
    closed = False
    for piece in pieces:
        reply.append(piece)
        seen += piece
        if closed:
            continue
        if plain is None:
            if not seen.strip():
                continue
            plain = not seen.lstrip().startswith("{")
            if plain:
                yield seen
                continue
        if plain:
            yield piece
            continue
        if start is None:
            match = _FIELD_START.search(seen)
            if match is None:
                continue
            start = match.end()
        text, consumed, closed = _decode_json_string(seen[start + done :])
        done += consumed
        if text:
            yield text


def _decode_json_string(raw: str) -> tuple[str, int, bool]:
    """Decode the start of a JSON string's content: (text, characters consumed, whether
    the closing quote was reached). An escape cut off at the end waits for more."""
    out: list[str] = []
    i = 0
    while i < len(raw):
        char = raw[i]
        if char == '"':
            return "".join(out), i + 1, True
        if char != "\\":
            out.append(char)
            i += 1
            continue
        if i + 1 >= len(raw):
            break
        code = raw[i + 1]
        if code == "u":
            if i + 6 > len(raw):
                break
            out.append(chr(int(raw[i + 2 : i + 6], 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(code, code))
            i += 2
    return "".join(out), i, False
